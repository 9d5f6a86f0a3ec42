"""ONE way to read the files and flags a user hands kvbench: bounded YAML, `--set`, error lines.

Every input file (scenarios, claims files) goes through the same three steps, so the same
input gets the same treatment everywhere:

- `read_yaml`: a size cap, an alias-bomb guard (yaml.safe_load shares aliased
  objects, but anything that walks the result expands them) and a depth guard, UTF-8
  only, a mapping at the top, and a syntax error as `line L, column C: problem`.
- `parse_set` + `apply_overrides`: `--set KEY=VALUE` with VALUE read as the TYPE OF THE
  FIELD it sets. YAML alone reads `off`, `no`, `yes`, `on` as booleans, so
  `--set telemetry.metrics=off` used to fail against `Literal["auto", "off"]`; here the
  field decides. A value no reading fits is one line naming the field, exit 2.
- `format_errors`: a pydantic ValidationError as `field.path: message` lines, with the
  noise pydantic adds for unions (discriminator tags, member names) removed.
"""

from __future__ import annotations

import copy
import re
import types
import typing
from collections.abc import Iterable
from pathlib import Path
from typing import Annotated, Any, Union

import yaml
from pydantic import BaseModel, TypeAdapter, ValidationError
from pydantic.fields import FieldInfo

from kvbench.errors import ConfigFileError, UsageError

MAX_FILE_BYTES = 1_000_000
MAX_EXPANDED_NODES = 100_000


# --- reading ----------------------------------------------------------------------------------------


def read_yaml(
    raw: bytes | Path,
    source: str | None = None,
    *,
    max_bytes: int = MAX_FILE_BYTES,
    what: str = "files",
    error: type[ConfigFileError] = ConfigFileError,
    loader: type[yaml.SafeLoader] = yaml.SafeLoader,
) -> dict[str, Any]:
    """A YAML mapping from bytes or a file, bounded in size, alias expansion and depth.
    `loader`: a SafeLoader subclass with the caller's own constructors (claims keep how each number
    was written)."""
    if isinstance(raw, Path):
        source = source or str(raw)
        try:
            raw = raw.read_bytes()
        except OSError as exc:
            raise error([f"cannot read: {exc.strerror}"], source) from None
    if len(raw) > max_bytes:
        raise error([f"file is {len(raw):,} bytes; {what} are limited to {max_bytes:,}"], source)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise error([f"not UTF-8 text (byte {exc.start})"], source) from None
    try:
        data = safe_load_bounded(text, loader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise error([f"YAML syntax error: {where}{problem}"], source) from None
    except RecursionError:  # PyYAML composes (and the alias guard walks) recursively
        raise error(["nested too deeply (thousands of levels of [ or {)"], source) from None
    if data is None:
        raise error(["the file is empty"], source)
    if not isinstance(data, dict):
        raise error([f"top level must be a mapping, not {type(data).__name__}"], source)
    return data


def _expanded_size(node: yaml.Node, memo: dict[int, int], cap: int = MAX_EXPANDED_NODES) -> int:
    """Nodes the document has once aliases are expanded (what a validator would walk), up to cap + 1."""
    key = id(node)
    if key in memo:
        return memo[key]
    memo[key] = 1  # a recursive alias counts once instead of looping
    size = 1
    if isinstance(node, yaml.SequenceNode):
        size += sum(_expanded_size(child, memo, cap) for child in node.value)
    elif isinstance(node, yaml.MappingNode):
        size += sum(_expanded_size(k, memo, cap) + _expanded_size(v, memo, cap) for k, v in node.value)
    memo[key] = size = min(size, cap + 1)
    return size


def safe_load_bounded(text: str, loader_class: type[yaml.SafeLoader] = yaml.SafeLoader) -> Any:
    """yaml.safe_load, refusing documents that expand past MAX_EXPANDED_NODES through aliases."""
    loader = loader_class(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        # only what aliases add counts: a big file of plain values is bounded by its size alone
        memo: dict[int, int] = {}
        _expanded_size(node, memo, cap=2**62)  # memo now holds each written node once
        written = len(memo)
        if _expanded_size(node, {}, cap=written + MAX_EXPANDED_NODES) > written + MAX_EXPANDED_NODES:
            raise yaml.YAMLError(
                f"YAML aliases: the document expands to more than {MAX_EXPANDED_NODES:,} nodes beyond "
                f"the {written:,} written (an alias bomb); refusing"
            )
        return loader.construct_document(node)
    finally:
        loader.dispose()


# --- --set KEY=VALUE ------------------------------------------------------------------------------


def parse_set(values: Iterable[str], flag: str = "--set") -> dict[str, str]:
    """`KEY=VALUE` pairs as raw strings; the value is typed later, by the field it sets."""
    out: dict[str, str] = {}
    for item in values:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"{flag} {item!r}: expected KEY=VALUE, e.g. {flag} load.concurrency=8")
        out[key.strip()] = raw
    return out


def field_at(model: type[BaseModel], dotted: str, data: dict[str, Any] | None = None) -> Any | None:
    """The type (with its constraints) of the field a dotted key names; None when no field has it.

    Walks nested models, `dict[str, X]` values and unions; in a discriminated union the member
    is the one the data's tag names, else the first member that has the next key."""
    ann: Any = model
    node: Any = data
    for part in dotted.split("."):
        ann = _select(ann, part, node)
        if ann is None:
            return None
        node = node.get(part) if isinstance(node, dict) else None
    return ann


def _select(ann: Any, part: str, node: Any) -> Any | None:
    found: list[Any] = []
    for member in _members(ann):
        if isinstance(member, type) and issubclass(member, BaseModel):
            info = member.model_fields.get(part)
            if info is not None and _tag_matches(member, node, part):
                found.append(_with_metadata(info))
        elif typing.get_origin(member) is dict:
            found.append(typing.get_args(member)[1])
    if not found:
        return None
    if len(found) == 1:
        return found[0]
    # setting a union's tag itself: any member's tag will do, and an error names them all
    if all(typing.get_origin(f) is typing.Literal for f in found):
        return typing.Literal[tuple(dict.fromkeys(v for f in found for v in typing.get_args(f)))]
    return Union[tuple(found)]  # noqa: UP007


def _members(ann: Any) -> list[Any]:
    if typing.get_origin(ann) is Annotated:
        return _members(typing.get_args(ann)[0])
    if typing.get_origin(ann) in (Union, types.UnionType):
        return [m for a in typing.get_args(ann) for m in _members(a)]
    return [ann]


def _tag_matches(member: type[BaseModel], node: Any, setting: str) -> bool:
    """A union member fits the data when the data names no tag, or names this member's
    (the tag being set right now does not count)."""
    if not isinstance(node, dict):
        return True
    for name, info in member.model_fields.items():
        if name != setting and typing.get_origin(info.annotation) is typing.Literal and name in node:
            return node[name] in typing.get_args(info.annotation)
    return True


def _with_metadata(info: FieldInfo) -> Any:
    return Annotated[(info.annotation, *info.metadata)] if info.metadata else info.annotation


def read_value(ann: Any, raw: str, key: str) -> Any:
    """`raw` read as the type `ann`: YAML's reading when the field accepts it, else the plain string
    (so `off` stays "off" for a string field and becomes false for a bool); neither -> one line."""
    adapter: TypeAdapter[Any] = TypeAdapter(ann)
    try:
        parsed = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        parsed = raw
    first_error: ValidationError | None = None
    for candidate in (parsed, raw) if parsed != raw else (raw,):
        try:
            adapter.validate_python(candidate)
            return candidate
        except ValidationError as exc:
            first_error = first_error or exc
    assert first_error is not None
    member = _narrow(ann, parsed, key, raw)
    if member is not None:  # a union's errors name every member; the one the value's tag names matters
        try:
            TypeAdapter(member).validate_python(parsed)
        except ValidationError as exc:
            first_error = exc
    err = first_error.errors()[0]
    where = ".".join([key, *clean_loc(err["loc"], {})])
    raise UsageError(f"{where}: {_plain(err)} (--set {key}={raw})")


def _tag_name(member: type[BaseModel]) -> str | None:
    """A union member's tag field: its first Literal field (`kind`)."""
    return next(
        (n for n, i in member.model_fields.items() if typing.get_origin(i.annotation) is typing.Literal), None
    )


def _narrow(ann: Any, parsed: Any, key: str, raw: str) -> Any | None:
    """The member of a tagged union of models that the mapping `parsed` names by its tag."""
    models = [m for m in _members(ann) if isinstance(m, type) and issubclass(m, BaseModel)]
    tag = _tag_name(models[0]) if len(models) > 1 and isinstance(parsed, dict) else None
    if tag is None or not all(tag in m.model_fields for m in models):
        return None
    kinds = {v: m for m in models for v in typing.get_args(m.model_fields[tag].annotation)}
    if parsed.get(tag) not in kinds:
        said = (
            f"names no {tag}; add {tag}: one of"
            if tag not in parsed
            else f"{tag} {parsed[tag]!r} is not one of"
        )
        raise UsageError(f"{key}: {said} {', '.join(map(str, kinds))} (--set {key}={raw})")
    return kinds[parsed[tag]]


def _plain(err: Any) -> str:
    """A --set value's problem without pydantic's own wording ("Input should be", "Field required")."""
    msg = {"extra_forbidden": "unknown key", "missing": "required"}.get(err["type"], err["msg"])
    msg = str(msg).removeprefix("Value error, ")
    return "must be " + msg.removeprefix("Input should be ") if msg.startswith("Input should be ") else msg


def apply_overrides(
    data: dict[str, Any], overrides: dict[str, Any], model: type[BaseModel] | None = None
) -> dict[str, Any]:
    """Set dotted keys in a copy of a raw config dict, creating sections as needed.

    Values that are strings from `--set` (wrap them in `Raw`) are read as the field's type when
    `model` is given; other values (from typed CLI flags) are set as they are."""
    out = copy.deepcopy(data)
    switched: list[tuple[str, type[BaseModel]]] = []
    # a union's tag first, so that `--set load.rate=5 --set load.kind=rate` lands in the new member
    for dotted, value in sorted(overrides.items(), key=lambda kv: not _tag_members(model, kv[0], out)):
        if model is not None and (member := _switch_member(model, dotted, value, out)) is not None:
            switched.append((dotted.rpartition(".")[0], member))
        if isinstance(value, Raw):
            ann = field_at(model, dotted, out) if model is not None else None
            value = read_value(ann, str(value), dotted) if ann is not None else _yaml_or_text(str(value))
        node = out
        parts = dotted.split(".")
        for part in parts[:-1]:
            child = node.get(part)
            if not isinstance(child, dict):
                child = {}
                node[part] = child
            node = child
        node[parts[-1]] = value
    for parent, member in switched:
        _check_switch(out, parent, member)
    return out


def _node(data: dict[str, Any], dotted: str) -> Any:
    for part in dotted.split("."):
        data = data.get(part) if isinstance(data, dict) else None  # type: ignore[assignment]
    return data


def _tag_members(model: type[BaseModel] | None, dotted: str, data: dict[str, Any]) -> list[type[BaseModel]]:
    """The union members whose tag field is the last part of `dotted` (`load.kind`: the load kinds)."""
    parent, _, leaf = dotted.rpartition(".")
    if model is None or not parent:
        return []
    members = [m for m in _members(field_at(model, parent, data)) if isinstance(m, type)]
    members = [m for m in members if issubclass(m, BaseModel) and _tag_name(m) == leaf]
    return members if len(members) > 1 else []


def _switch_member(
    model: type[BaseModel], dotted: str, value: Any, data: dict[str, Any]
) -> type[BaseModel] | None:
    """Setting a union's tag (`--set load.kind=rate`) switches the section to that member: the keys
    the new member has no field for are dropped (a concurrent load's `concurrency` means nothing to
    a rate load), the ones it shares are kept, the rest take the new member's defaults."""
    parent, _, leaf = dotted.rpartition(".")
    members = _tag_members(model, dotted, data)
    chosen = next(
        (m for m in members if str(value) in typing.get_args(m.model_fields[leaf].annotation)), None
    )
    node = _node(data, parent)
    if chosen is None or not isinstance(node, dict) or node.get(leaf) in (None, str(value)):
        return chosen  # nothing to switch from: the section is new, untagged or already this kind
    for key in [k for k in node if k not in chosen.model_fields]:
        del node[key]
    return chosen


def _check_switch(data: dict[str, Any], parent: str, member: type[BaseModel]) -> None:
    """A switched-to member's required fields that nothing set: one line naming them and the form."""
    given = _node(data, parent) or {}
    missing = [n for n, info in member.model_fields.items() if info.is_required() and n not in given]
    if missing:
        tag = _tag_name(member) or "kind"
        kind = typing.get_args(member.model_fields[tag].annotation)[0]
        sets, fields = (
            " ".join(f"--set {parent}.{n}=..." for n in missing),
            ", ".join(f"{n}: ..." for n in missing),
        )
        raise UsageError(
            f"{parent}.{tag}={kind}: also needs {', '.join(f'{parent}.{n}' for n in missing)}: add {sets} "
            f"(or --set '{parent}={{{tag}: {kind}, {fields}}}')"
        )


class Raw(str):
    """A value typed on the command line as text, to be read as the type of the field it sets."""

    __slots__ = ()


def _yaml_or_text(raw: str) -> Any:
    try:
        return yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        return raw


def flag_keys(model: type[BaseModel]) -> dict[str, str]:
    """CLI option name -> dotted key, from fields that carry `json_schema_extra={"flag": NAME}`."""
    out: dict[str, str] = {}
    seen: set[type] = set()

    def walk(m: type[BaseModel], prefix: str) -> None:
        if m in seen:
            return
        seen.add(m)
        for name, info in m.model_fields.items():
            extra = info.json_schema_extra
            if isinstance(extra, dict) and isinstance(extra.get("flag"), str):
                out[str(extra["flag"])] = prefix + name
            for sub in _members(info.annotation):
                if isinstance(sub, type) and issubclass(sub, BaseModel):
                    walk(sub, f"{prefix}{name}.")
        seen.discard(m)

    walk(model, "")
    return out


# --- error lines -------------------------------------------------------------------------------------


def union_tags(model: type[BaseModel]) -> dict[str, frozenset[str]]:
    """Field name -> the tags of its discriminated union, over the whole model tree: pydantic puts
    the tag into an error's location (`load.concurrent.concurrency`), which the user never wrote."""
    out: dict[str, set[str]] = {}
    seen: set[type] = set()

    def walk(m: type[BaseModel]) -> None:
        if m in seen:
            return
        seen.add(m)
        for name, info in m.model_fields.items():
            members = [
                x for x in _members(info.annotation) if isinstance(x, type) and issubclass(x, BaseModel)
            ]
            disc = info.discriminator if isinstance(info.discriminator, str) else None
            for sub in members:
                if disc and disc in sub.model_fields:
                    out.setdefault(name, set()).update(typing.get_args(sub.model_fields[disc].annotation))
                walk(sub)

    walk(model)
    return {k: frozenset(v) for k, v in out.items()}


def clean_loc(loc: tuple[Any, ...], tags: dict[str, frozenset[str]]) -> tuple[str, ...]:
    """Drop what pydantic adds for unions: the tag after a union field, member type names."""
    out: list[str] = []
    for i, part in enumerate(loc):
        text = str(part)
        if i > 0 and text in tags.get(str(loc[i - 1]), ()):
            continue
        if "[" in text:  # e.g. list[int], function-after[_order(), LengthRange]
            continue
        out.append(text)
    return tuple(out)


def format_errors(exc: ValidationError, model: type[BaseModel] | None = None) -> list[str]:
    """One `field.path: message` line per problem, duplicates and union noise removed."""
    tags = union_tags(model) if model is not None else {}
    errors = [(clean_loc(e["loc"], tags), e) for e in exc.errors()]
    lines: list[str] = []
    for loc, err in errors:
        # a union reports every member; a member-type mismatch next to a real error is noise
        if err["type"] in ("list_type", "dict_type", "model_type", "model_attributes_type") and any(
            other is not err and other_loc[: len(loc)] == loc for other_loc, other in errors
        ):
            continue
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = "unknown key"
        elif err["type"] in ("union_tag_not_found", "union_tag_invalid"):
            msg = _tag_message(err, sorted(tags.get(loc[-1], ()) if loc else ()))
        where = ".".join(loc)
        if msg.startswith(where + ":"):
            msg = msg[len(where) + 1 :].strip()
        # a cross-field check names its own field (the whole path, or one below where it ran)
        self_named = re.match(r"^[\w.]+: ", msg) and (not where or msg.startswith(where + "."))
        line = msg if self_named else f"{where or '(top level)'}: {msg}"
        if line not in lines:
            lines.append(line)
    return lines


def _tag_message(err: Any, kinds: list[str]) -> str:
    """A discriminated union's missing or unknown tag, in the user's words (pydantic's names its
    internals: 'Unable to extract tag using discriminator')."""
    ctx = err.get("ctx") or {}
    tag = str(ctx.get("discriminator", "kind")).strip("'")
    choices = ", ".join(kinds) or str(ctx.get("expected_tags", ""))
    if err["type"] == "union_tag_not_found":
        return f"names no {tag}; add {tag}: one of {choices}"
    return f"{tag} {ctx.get('tag')!r} is not one of {choices}"


def validate(
    model: type[BaseModel],
    data: dict[str, Any],
    source: str | None = None,
    error: type[ConfigFileError] = ConfigFileError,
) -> Any:
    """`model` from a raw dict, or a ConfigFileError (of the caller's kind) with one line per problem."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise error(format_errors(exc, model), source) from None
