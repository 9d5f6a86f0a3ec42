/* The mock's two per-block hot paths in C: what kvbench/mock/native.py loads when it was built.

Each function here computes exactly what its pure-Python reference computes (tests compare them on
random inputs, tests/unit/test_mock_native.py); the references stay the specification and the
fallback wherever no C compiler built this file.

  span_plain_keys(data, block_tokens, root_seed, digest_seed)
      span_hash.SpanHash + tokenizer._plain_words_keys in one pass over the bytes: None unless the
      text is plain words (PLAIN_BYTES only, no leading, trailing or double space); else
      (token count, block keys (tuple of int), digest (int)).

  KeyOrder
      an insertion-ordered set of 64-bit keys with an LRU's bulk moves: what cache.LRUTier keeps in
      an OrderedDict (keys in LRU order, oldest first). A hash table (open addressing, CPython's
      perturbed probe, so a prompt's neighbouring keys fill neighbouring slots) over a doubly
      linked list of nodes in arrays.

Why C: a 120k-token prompt has 7,500 blocks; numpy passes over its 700 KB and an OrderedDict insert
per block cost the mock ~4 ms of CPU per cold request, more than the modelled work at a fast pace.
*/
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define M1 0xBF58476D1CE4E5B9ULL
#define M2 0x94D049BB133111EBULL
#define GOLDEN 0x9E3779B97F4A7C15ULL
#define KEY_BITS 60
#define LOW_BITS 24
#define LOW_MASK ((1ULL << LOW_BITS) - 1)
#define HIGH_MASK (((1ULL << KEY_BITS) - 1) & ~LOW_MASK)

static inline uint64_t mix(uint64_t x) {
    x ^= x >> 30;
    x *= M1;
    x ^= x >> 27;
    x *= M2;
    x ^= x >> 31;
    return x;
}

/* The word at byte offset 8*j, native order, zero-padded past `size` (as SpanHash's view). */
static inline uint64_t word_at(const unsigned char *p, Py_ssize_t size, Py_ssize_t j) {
    uint64_t w = 0;
    Py_ssize_t off = 8 * j, avail = size - off;
    if (avail >= 8)
        memcpy(&w, p + off, 8);
    else if (avail > 0)
        memcpy(&w, p + off, (size_t)avail);
    return w;
}

/* The whole word at byte offset 8*j (inside the data). */
static inline uint64_t full_word(const unsigned char *p, Py_ssize_t j) {
    uint64_t w;
    memcpy(&w, p + 8 * j, 8);
    return w;
}

/* SpanHash._tails for one prefix end e: its partial last word, with its length, mixed. */
static inline uint64_t tail_of(const unsigned char *p, Py_ssize_t size, Py_ssize_t e) {
    Py_ssize_t q = e / 8;
    unsigned r = (unsigned)(e & 7);
    uint64_t mask = r ? ((1ULL << (8 * r)) - 1) : 0;
    uint64_t t = (word_at(p, size, q) & mask) ^ ((uint64_t)q * GOLDEN);
    t += (uint64_t)r * M2;
    return mix(t) ^ ((uint64_t)e * GOLDEN);
}

/* Byte classes: 1 for the bytes of plain words (ASCII letters, digits, '_'), 2 for a space. */
static unsigned char CLASS[256];

static void init_tables(void) {
    for (int c = 0; c < 256; c++)
        CLASS[c] = (c >= '0' && c <= '9') || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_';
    CLASS[' '] = 2;
}

/* of a 16-bit mask (one bit per byte of a 16-byte block): no popcnt instruction assumed */
static inline int POPCOUNT(unsigned x) {
    x = x - ((x >> 1) & 0x5555u);
    x = (x & 0x3333u) + ((x >> 2) & 0x3333u);
    x = (x + (x >> 4)) & 0x0F0Fu;
    return (int)((x + (x >> 8)) & 0x1Fu);
}

#if defined(__GNUC__) || defined(__clang__)
#define CTZ(x) __builtin_ctz(x)
#else
static int CTZ(unsigned x) { int n = 0; while (!(x & 1)) { x >>= 1; n++; } return n; }
#endif

/* The scan of a prompt's bytes: plain words only, and the offset of every block_tokens-th space.
   Spaces sit at irregular offsets (words of any length), so a branch per space mispredicts about
   once a word: CPython's bytes.count(b" ") alone costs ~1 ms on 700 KB of kvbench's prompts. The
   scan goes 16 bytes at a time (SSE2, x86-64's baseline) or a byte at a time without a branch on
   the byte's class, and branches only where a block ends (once per block_tokens words). */
typedef struct {
    Py_ssize_t spaces, until_end, n_ends, *ends, block_tokens;
    unsigned prev_space; /* the previous byte was a space */
} Scan;

static inline void take_spaces(Scan *sc, unsigned mask, Py_ssize_t base) {
    /* mask: the spaces among the bytes from `base`, one bit each */
    Py_ssize_t pc = POPCOUNT(mask);
    if (pc < sc->until_end) {
        sc->until_end -= pc;
        sc->spaces += pc;
        return;
    }
    while (mask) {
        sc->spaces++;
        if (--sc->until_end == 0) {
            sc->ends[sc->n_ends++] = base + CTZ(mask);
            sc->until_end = sc->block_tokens;
        }
        mask &= mask - 1;
    }
}

#if defined(__SSE2__) && !defined(KVBENCH_NATIVE_SCALAR)
#define SCAN_SSE2 1
#include <emmintrin.h>
#endif

/* 0: plain words so far; -1: a byte that is not */
static int scan_bytes(Scan *sc, const unsigned char *p, Py_ssize_t size) {
    Py_ssize_t i = 0;
#if defined(SCAN_SSE2)
    const __m128i space = _mm_set1_epi8(' '), under = _mm_set1_epi8('_'), case_bit = _mm_set1_epi8(0x20);
    const __m128i d_lo = _mm_set1_epi8('0' - 1), d_hi = _mm_set1_epi8('9' + 1);
    const __m128i a_lo = _mm_set1_epi8('a' - 1), a_hi = _mm_set1_epi8('z' + 1);
    for (; i + 16 <= size; i += 16) {
        __m128i v = _mm_loadu_si128((const __m128i *)(p + i));
        __m128i is_space = _mm_cmpeq_epi8(v, space);
        /* signed compares: a byte >= 0x80 is negative and in no range, so it is not plain */
        __m128i digit = _mm_and_si128(_mm_cmpgt_epi8(v, d_lo), _mm_cmplt_epi8(v, d_hi));
        __m128i folded = _mm_or_si128(v, case_bit); /* A-Z to a-z; nothing else lands in a-z */
        __m128i alpha = _mm_and_si128(_mm_cmpgt_epi8(folded, a_lo), _mm_cmplt_epi8(folded, a_hi));
        __m128i ok = _mm_or_si128(_mm_or_si128(digit, alpha), _mm_or_si128(_mm_cmpeq_epi8(v, under), is_space));
        unsigned m = (unsigned)_mm_movemask_epi8(is_space);
        /* checked before the spaces are taken: `ends` has room for plain words' spaces only */
        if (((unsigned)_mm_movemask_epi8(ok) ^ 0xFFFFu) | (m & (m >> 1)) | (m & sc->prev_space))
            return -1;
        sc->prev_space = m >> 15;
        if (m)
            take_spaces(sc, m, i);
    }
#endif
    for (; i < size; i++) {
        unsigned c = CLASS[p[i]], is_space = c >> 1;
        if (c == 0 || (is_space & sc->prev_space))
            return -1;
        sc->prev_space = is_space;
        sc->spaces += is_space;
        sc->until_end -= is_space;
        if (sc->until_end == 0) {
            sc->ends[sc->n_ends++] = i;
            sc->until_end = sc->block_tokens;
        }
    }
    return 0;
}

/* The block ends of the prompt being scanned: one buffer kept between calls (the GIL is held
   throughout a call), as a fresh 170 KB one per 120k-token prompt cost its page faults each time. */
static Py_ssize_t *ends_buf = NULL, ends_cap = 0;

static Py_ssize_t *ends_room(Py_ssize_t n) {
    if (n > ends_cap) {
        Py_ssize_t cap = n > 2 * ends_cap ? n : 2 * ends_cap;
        Py_ssize_t *grown = PyMem_Realloc(ends_buf, sizeof(Py_ssize_t) * (size_t)cap);
        if (grown == NULL) {
            PyErr_NoMemory();
            return NULL;
        }
        ends_buf = grown;
        ends_cap = cap;
    }
    return ends_buf;
}

static PyObject *span_plain_keys(PyObject *Py_UNUSED(self), PyObject *args) {
    Py_buffer buf;
    Py_ssize_t block_tokens;
    unsigned long long root_seed, digest_seed;
    if (!PyArg_ParseTuple(args, "y*nKK", &buf, &block_tokens, &root_seed, &digest_seed))
        return NULL;
    const unsigned char *p = (const unsigned char *)buf.buf;
    Py_ssize_t size = buf.len;
    PyObject *result = NULL;
    Py_ssize_t *ends = NULL;
    if (block_tokens < 1) {
        PyBuffer_Release(&buf);
        PyErr_SetString(PyExc_ValueError, "block_tokens must be positive");
        return NULL;
    }
    if (size == 0 || p[0] == ' ' || p[size - 1] == ' ') {
        PyBuffer_Release(&buf);
        Py_RETURN_NONE;
    }
    /* pass 1 (bytes): plain words only; every block_tokens-th space ends a block */
    ends = ends_room(size / (2 * block_tokens) + 2); /* size/2 spaces at most in plain words */
    if (ends == NULL) {
        PyBuffer_Release(&buf);
        return NULL;
    }
    Scan sc = {0, block_tokens, 0, ends, block_tokens, 0};
    if (scan_bytes(&sc, p, size) < 0)
        goto not_plain;
    Py_ssize_t spaces = sc.spaces, n_ends = sc.n_ends;
    Py_ssize_t n_tokens = spaces + 1, n_full = n_tokens / block_tokens;
    if (n_ends < n_full) /* the last full block ends the text (n_ends is n_full or one less) */
        ends[n_ends++] = size;
    /* pass 2 (words): the running sum of mixed, position-salted words; a key at each end */
    PyObject *keys = PyTuple_New(n_ends);
    if (keys == NULL)
        goto done;
    uint64_t sum = 0, first = 0;
    Py_ssize_t j = 0;
    for (Py_ssize_t k = 0; k < n_ends; k++) {
        Py_ssize_t e = ends[k], q = e / 8;
        for (; j < q; j++)
            sum += mix(full_word(p, j) ^ ((uint64_t)j * GOLDEN));
        uint64_t key = mix((sum + tail_of(p, size, e)) ^ (uint64_t)root_seed);
        if (k == 0)
            first = key;
        key = (key & HIGH_MASK) | ((first + (uint64_t)k) & LOW_MASK);
        PyObject *v = PyLong_FromUnsignedLongLong(key);
        if (v == NULL) {
            Py_DECREF(keys);
            goto done;
        }
        PyTuple_SET_ITEM(keys, k, v);
    }
    Py_ssize_t q = size / 8;
    for (; j < q; j++)
        sum += mix(full_word(p, j) ^ ((uint64_t)j * GOLDEN));
    uint64_t digest = mix((sum + tail_of(p, size, size)) ^ (uint64_t)digest_seed);
    result = Py_BuildValue("nNK", n_tokens, keys, (unsigned long long)digest);
    goto done;
not_plain:
    result = Py_None;
    Py_INCREF(result);
done:
    PyBuffer_Release(&buf);
    return result;
}

/* ---------------------------------------------------------------------------------------------- */
/* KeyOrder */

#define EMPTY (-1)
#define DUMMY (-2)
#define NIL (-1)
#define FREE (-2) /* prev of a node on the free list */

typedef struct {
    uint64_t key; /* the key, beside its node: a probe compares without touching the node arrays */
    int64_t node; /* node index, EMPTY or DUMMY */
} Slot;

typedef struct {
    PyObject_HEAD
    Slot *slots;
    Py_ssize_t mask;    /* slots - 1 (a power of two) */
    Py_ssize_t filled;  /* slots not EMPTY (live + DUMMY) */
    uint64_t *key;      /* per node */
    int64_t *prev, *next;
    Py_ssize_t nodes;   /* node arrays' size */
    Py_ssize_t used;    /* live keys */
    int64_t head, tail; /* oldest, newest; NIL when empty */
    int64_t free_head;  /* reusable nodes, chained by next */
    Py_ssize_t top;     /* nodes handed out so far (below it: live or free) */
} KeyOrder;

static int key_of(PyObject *o, uint64_t *out) {
    /* the usual key (below 2**63) through the digit loop; PyLong_AsUnsignedLongLong goes through
       _PyLong_AsByteArray, a third of a lookup's time */
    int overflow = 0;
    long long small = PyLong_Check(o) ? PyLong_AsLongLongAndOverflow(o, &overflow) : -1;
    if (small >= 0 && !overflow) {
        *out = (uint64_t)small;
        return 0;
    }
    if (small == -1 && PyErr_Occurred())
        return -1;
    unsigned long long v = PyLong_AsUnsignedLongLong(o);
    if (v == (unsigned long long)-1 && PyErr_Occurred()) {
        if (PyErr_ExceptionMatches(PyExc_OverflowError) || PyErr_ExceptionMatches(PyExc_TypeError)) {
            PyErr_Clear();
            PyErr_SetString(PyExc_TypeError, "KeyOrder holds ints in [0, 2**64)");
        }
        return -1;
    }
    *out = (uint64_t)v;
    return 0;
}

/* The slot holding `k` (>= 0), or -1 - (the first free slot to put it in). */
static Py_ssize_t find_slot(KeyOrder *s, uint64_t k) {
    Py_ssize_t mask = s->mask, i = (Py_ssize_t)(k & (uint64_t)mask), free_at = -1;
    uint64_t perturb = k;
    for (;;) {
        int64_t n = s->slots[i].node;
        if (n == EMPTY)
            return -1 - (free_at >= 0 ? free_at : i);
        if (n == DUMMY) {
            if (free_at < 0)
                free_at = i;
        } else if (s->slots[i].key == k) {
            return i;
        }
        perturb >>= 5;
        i = (Py_ssize_t)((5 * (uint64_t)i + perturb + 1) & (uint64_t)mask);
    }
}

static int resize_slots(KeyOrder *s, Py_ssize_t want_live) {
    /* at most half full (live + DUMMY) before the next resize, a quarter just after: a prompt's run
       of keys lands in mostly free slots, so few probes leave its neighbourhood */
    Py_ssize_t size = 16;
    while (size < 4 * want_live)
        size <<= 1;
    Slot *slots = PyMem_Malloc(sizeof(Slot) * (size_t)size);
    if (slots == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < size; i++)
        slots[i].node = EMPTY;
    PyMem_Free(s->slots);
    s->slots = slots;
    s->mask = size - 1;
    s->filled = 0;
    /* the nodes in array order, not list order: a prompt's keys were appended together, so this
       walks memory in order, and their neighbouring low bits fill neighbouring slots */
    for (int64_t n = 0; n < s->top; n++) {
        if (s->prev[n] == FREE)
            continue;
        Py_ssize_t at = -1 - find_slot(s, s->key[n]);
        s->slots[at].key = s->key[n];
        s->slots[at].node = n;
        s->filled++;
    }
    return 0;
}

static int grow_nodes(KeyOrder *s) {
    Py_ssize_t size = s->nodes ? 2 * s->nodes : 64;
    uint64_t *key = PyMem_Realloc(s->key, sizeof(uint64_t) * (size_t)size);
    if (key == NULL)
        goto fail;
    s->key = key;
    int64_t *prev = PyMem_Realloc(s->prev, sizeof(int64_t) * (size_t)size);
    if (prev == NULL)
        goto fail;
    s->prev = prev;
    int64_t *next = PyMem_Realloc(s->next, sizeof(int64_t) * (size_t)size);
    if (next == NULL)
        goto fail;
    s->next = next;
    s->nodes = size;
    return 0;
fail:
    PyErr_NoMemory();
    return -1;
}

static inline void unlink_node(KeyOrder *s, int64_t n) {
    int64_t p = s->prev[n], x = s->next[n];
    if (p != NIL)
        s->next[p] = x;
    else
        s->head = x;
    if (x != NIL)
        s->prev[x] = p;
    else
        s->tail = p;
}

static inline void append_node(KeyOrder *s, int64_t n) {
    s->prev[n] = s->tail;
    s->next[n] = NIL;
    if (s->tail != NIL)
        s->next[s->tail] = n;
    else
        s->head = n;
    s->tail = n;
}

/* Move `k` to the newest end if held (returns 1), else 0; `add`: append it when not held. */
static int touch_or_add(KeyOrder *s, uint64_t k, int add) {
    if (add && 2 * (s->filled + 1) >= s->mask + 1 && resize_slots(s, s->used + 1) < 0)
        return -1;
    Py_ssize_t at = find_slot(s, k);
    if (at >= 0) {
        int64_t n = s->slots[at].node;
        if (n != s->tail) {
            unlink_node(s, n);
            append_node(s, n);
        }
        return 1;
    }
    if (!add)
        return 0;
    at = -1 - at;
    int64_t n;
    if (s->free_head != NIL) {
        n = s->free_head;
        s->free_head = s->next[n];
    } else {
        if (s->top == s->nodes && grow_nodes(s) < 0)
            return -1;
        n = s->top++;
    }
    s->key[n] = k;
    append_node(s, n);
    if (s->slots[at].node == EMPTY)
        s->filled++;
    s->slots[at].key = k;
    s->slots[at].node = n;
    s->used++;
    return 0;
}

static void remove_at(KeyOrder *s, Py_ssize_t at) {
    int64_t n = s->slots[at].node;
    s->slots[at].node = DUMMY;
    unlink_node(s, n);
    s->prev[n] = FREE;
    s->next[n] = s->free_head;
    s->free_head = n;
    s->used--;
}

static PyObject *ko_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    if ((kwds != NULL && PyDict_GET_SIZE(kwds)) || !PyArg_ParseTuple(args, ":KeyOrder")) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_TypeError, "KeyOrder() takes no arguments");
        return NULL;
    }
    KeyOrder *s = (KeyOrder *)type->tp_alloc(type, 0);
    if (s == NULL)
        return NULL;
    s->head = s->tail = s->free_head = NIL;
    if (resize_slots(s, 0) < 0) {
        Py_DECREF(s);
        return NULL;
    }
    return (PyObject *)s;
}

static void ko_dealloc(KeyOrder *s) {
    PyMem_Free(s->slots);
    PyMem_Free(s->key);
    PyMem_Free(s->prev);
    PyMem_Free(s->next);
    Py_TYPE(s)->tp_free((PyObject *)s);
}

static Py_ssize_t ko_len(KeyOrder *s) { return s->used; }


/* seq as a fast sequence (list or tuple), its items, and the range [a, b) of it to walk */
static PyObject *range_of(PyObject *args, PyObject ***items, Py_ssize_t *a, Py_ssize_t *b, const char *fmt) {
    PyObject *seq;
    *a = 0;
    *b = PY_SSIZE_T_MAX;
    if (!PyArg_ParseTuple(args, fmt, &seq, a, b))
        return NULL;
    PyObject *fast = PySequence_Fast(seq, "keys must be a sequence");
    if (fast == NULL)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    if (*a < 0)
        *a = 0;
    if (*b > n)
        *b = n;
    *items = PySequence_Fast_ITEMS(fast);
    return fast;
}

/* 1 if `o` is a held key, else 0 (anything that is no key is not held) */
static int held_one(KeyOrder *s, PyObject *o) {
    uint64_t k;
    if (!PyLong_Check(o))
        return 0;
    if (key_of(o, &k) < 0) {
        PyErr_Clear();
        return 0;
    }
    return find_slot(s, k) >= 0;
}

static int ko_contains(KeyOrder *s, PyObject *o) { return held_one(s, o); }

static PyObject *ko_held(KeyOrder *s, PyObject *args) {
    PyObject **items;
    Py_ssize_t a, b;
    PyObject *fast = range_of(args, &items, &a, &b, "O|nn:held");
    if (fast == NULL)
        return NULL;
    Py_ssize_t n = b > a ? b - a : 0;
    PyObject *out = PyList_New(n);
    if (out == NULL)
        goto fail;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *v = held_one(s, items[a + i]) ? Py_True : Py_False;
        Py_INCREF(v);
        PyList_SET_ITEM(out, i, v);
    }
    Py_DECREF(fast);
    return out;
fail:
    Py_DECREF(fast);
    return NULL;
}

static PyObject *ko_all_held(KeyOrder *s, PyObject *args) {
    PyObject **items;
    Py_ssize_t a, b;
    PyObject *fast = range_of(args, &items, &a, &b, "O|nn:all_held");
    if (fast == NULL)
        return NULL;
    int all = 1;
    for (Py_ssize_t i = a; i < b && all; i++)
        all = held_one(s, items[i]);
    Py_DECREF(fast);
    return PyBool_FromLong(all);
}

/* keys[a:b], each moved to the newest end in order (`add`: appended when not held) */
static PyObject *walk(KeyOrder *s, PyObject *args, int add, const char *fmt) {
    PyObject **items;
    Py_ssize_t a, b;
    PyObject *fast = range_of(args, &items, &a, &b, fmt);
    if (fast == NULL)
        return NULL;
    Py_ssize_t fresh = 0;
    for (Py_ssize_t i = a; i < b; i++) {
        uint64_t k;
        if (key_of(items[i], &k) < 0)
            goto fail;
        int r = touch_or_add(s, k, add);
        if (r < 0)
            goto fail;
        fresh += add && r == 0;
    }
    Py_DECREF(fast);
    return PyLong_FromSsize_t(fresh);
fail:
    Py_DECREF(fast);
    return NULL;
}

static PyObject *ko_touch(KeyOrder *s, PyObject *args) { return walk(s, args, 0, "O|nn:touch"); }

static PyObject *ko_add(KeyOrder *s, PyObject *args) { return walk(s, args, 1, "O|nn:add"); }

static PyObject *ko_pop_oldest(KeyOrder *s, PyObject *args) {
    Py_ssize_t count;
    if (!PyArg_ParseTuple(args, "n:pop_oldest", &count))
        return NULL;
    if (count > s->used)
        count = s->used;
    if (count < 0)
        count = 0;
    PyObject *out = PyList_New(count);
    if (out == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < count; i++) {
        uint64_t k = s->key[s->head];
        PyObject *v = PyLong_FromUnsignedLongLong(k);
        if (v == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, i, v);
        remove_at(s, find_slot(s, k));
    }
    return out;
}

static PyObject *ko_discard(KeyOrder *s, PyObject *arg) {
    uint64_t k;
    if (key_of(arg, &k) < 0)
        return NULL;
    Py_ssize_t at = find_slot(s, k);
    if (at >= 0)
        remove_at(s, at);
    return PyBool_FromLong(at >= 0);
}

static PyObject *ko_clear(KeyOrder *s, PyObject *Py_UNUSED(ignored)) {
    s->head = s->tail = s->free_head = NIL;
    s->used = 0;
    s->top = 0;
    if (resize_slots(s, 0) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *ko_keys(KeyOrder *s, PyObject *Py_UNUSED(ignored)) {
    PyObject *out = PyList_New(s->used);
    if (out == NULL)
        return NULL;
    Py_ssize_t i = 0;
    for (int64_t n = s->head; n != NIL; n = s->next[n], i++) {
        PyObject *v = PyLong_FromUnsignedLongLong(s->key[n]);
        if (v == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, i, v);
    }
    return out;
}

static PyObject *ko_iter(KeyOrder *s) {
    PyObject *keys = ko_keys(s, NULL);
    if (keys == NULL)
        return NULL;
    PyObject *it = PyObject_GetIter(keys);
    Py_DECREF(keys);
    return it;
}

static PyMethodDef ko_methods[] = {
    {"held", (PyCFunction)ko_held, METH_VARARGS, "held(keys, a=0, b=len) -> [bool]: whether each of keys[a:b] is held"},
    {"all_held", (PyCFunction)ko_all_held, METH_VARARGS, "all_held(keys, a=0, b=len) -> bool"},
    {"touch", (PyCFunction)ko_touch, METH_VARARGS,
     "touch(keys, a=0, b=len) -> 0: each held key of keys[a:b] moved to the newest end, in order"},
    {"add", (PyCFunction)ko_add, METH_VARARGS,
     "add(keys, a=0, b=len) -> int: each of keys[a:b] moved to the newest end in order, appended when "
     "not held; returns how many were new"},
    {"pop_oldest", (PyCFunction)ko_pop_oldest, METH_VARARGS, "pop_oldest(n) -> [int]: the n oldest, removed"},
    {"discard", (PyCFunction)ko_discard, METH_O, "discard(key) -> bool: removed if held"},
    {"clear", (PyCFunction)ko_clear, METH_NOARGS, "remove every key"},
    {"keys", (PyCFunction)ko_keys, METH_NOARGS, "keys() -> [int], oldest first"},
    {NULL, NULL, 0, NULL},
};

static PySequenceMethods ko_as_sequence = {
    .sq_length = (lenfunc)ko_len,
    .sq_contains = (objobjproc)ko_contains,
};

static PyTypeObject KeyOrderType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "kvbench.mock._native.KeyOrder",
    .tp_doc = "Keys in LRU order (oldest first) with bulk moves; see kvbench/mock/native.py.",
    .tp_basicsize = sizeof(KeyOrder),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = ko_new,
    .tp_dealloc = (destructor)ko_dealloc,
    .tp_as_sequence = &ko_as_sequence,
    .tp_iter = (getiterfunc)ko_iter,
    .tp_methods = ko_methods,
};

static PyMethodDef module_methods[] = {
    {"span_plain_keys", span_plain_keys, METH_VARARGS,
     "span_plain_keys(data, block_tokens, root_seed, digest_seed) -> (tokens, keys, digest) | None"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_native", "The mock's per-block hot paths in C (kvbench/mock/native.py).", -1,
    module_methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__native(void) {
    init_tables();
    if (PyType_Ready(&KeyOrderType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    Py_INCREF(&KeyOrderType);
    if (PyModule_AddObject(m, "KeyOrder", (PyObject *)&KeyOrderType) < 0) {
        Py_DECREF(&KeyOrderType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
