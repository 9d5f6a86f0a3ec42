"""Every `kvbench ...` command in a fenced block of README.md and docs/*.md runs, small, on the mock.

So the docs cannot rot: a flag renamed, a scenario removed or a placeholder nobody can fill fails
here, naming the page and line. One test per command, in page order.

What counts as a command: in a ```bash, ```sh, ```shell or plain ``` block, a line starting with
`kvbench ` or `$ kvbench ` (`sudo kvbench ` too, which must sit in a skipped block); in a
```console block only `$ ` lines; a line ending in `\\` continues on the next. Other blocks
(```text, ```yaml, ```python) are never run.

How a page runs: its commands run in order, as a reader would type them, in one fresh directory of
the page's own (so `results/` and the files one command writes are there for the next). A test
picked alone first runs the commands above it on its page.

How a run is kept small: `kvbench run` gets `--quiet --no-report`, `kvbench sweep` `--quiet`, and
both get `--set` overrides from SMALL for their test kind, except for fields the command sets
itself (by --set, --over or a flag: a doc's own small values stay as written); a sweep's `--over`
list keeps its first two values, a search range `LO..HI` ends at 4 x LO, each load run once
(`--max-repeats 1`).

What the docs write, and the test fills in:
- `http://127.0.0.1:8000` is a mock this test serves (`kvbench mock serve`, profile ci);
- `results/<anything>` is a run made earlier on the page (several in one command: the newest,
  in the order they were made), `results/<sweep...>` a sweep made earlier on the page;
- `kvbench mock serve ...` is started with a free port and stopped once it listens.

Directives, HTML comments on their own line before a block (invisible on GitHub):
- `<!-- doc-test: skip (why) -->`: the block's commands are listed as skipped with that reason
  (a real engine, root, Ray; or `lands with #NN` for what a pending change adds);
- `<!-- doc-test: file NAME -->`: the block's text is written to NAME in the page's directory;
- `<!-- doc-test: exit N -->`: the block's commands must exit N (default 0).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SHELL_FENCES = {"", "bash", "sh", "shell"}
DIRECTIVE = re.compile(r"^\s*<!--\s*doc-test:\s*(skip|file|exit)\b\s*(.*?)\s*-->\s*$")
FENCE = re.compile(r"^\s*(```+|~~~+)\s*([\w+-]*)")
DOC_URL = "http://127.0.0.1:8000"
PLACEHOLDER = re.compile(r"results/<([^>]+)>")
TIMEOUT_S = 240

# Small enough for a busy 2-core machine, large enough that each test kind does what it does.
SMALL: dict[str, dict[str, str]] = {
    "ttft": {"prompts.lengths": "[1000,2000,4000,8000]"},
    "throughput": {
        "prompts.count": "4",
        "prompts.lengths": "[2000]",
        "load.requests": "8",
        "load.concurrency": "4",
        "test.noisy.pairs": "1",
        "test.noisy.settle_s": "0.1",
    },
    "sessions": {
        "test.users": "2",
        "test.turns": "2",
        "test.active_users": "2",
        "test.system_prompt_tokens": "200",
        "test.first_message_tokens": "500",
        "test.turn_tokens": "100",
        "test.think_time": "{distribution: exponential, mean_s: 0.05, max_s: 0.1}",
    },
    "replay": {"test.trace.limit": "20", "test.trace.speedup": "50"},
}


@dataclass(frozen=True)
class Step:
    """One thing a page does, in order: run a command, or write a file a block shows."""

    page: str
    line: int
    command: str = ""
    skip: str = ""
    exit_code: int = 0
    file_name: str = ""
    file_text: str = ""

    @property
    def id(self) -> str:
        return f"{self.page}:{self.line}"


def _command_start(text: str, fence: str) -> str | None:
    s = text.strip()
    if s.startswith("$ "):
        s = s[2:].lstrip()
    elif fence == "console":
        return None
    return s if s.startswith(("kvbench ", "sudo kvbench ")) else None


def parse_page(text: str, page: str) -> list[Step]:
    steps: list[Step] = []
    pending: dict[str, str] = {}
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        d = DIRECTIVE.match(lines[i])
        if d:
            pending[d.group(1)] = d.group(2).strip("() ")
            i += 1
            continue
        f = FENCE.match(lines[i])
        if not f:
            i += 1
            continue
        marker, lang = f.group(1), f.group(2).lower()
        start = i + 1
        i = start
        while i < len(lines) and not lines[i].strip().startswith(marker):
            i += 1
        body = lines[start:i]
        i += 1
        if "file" in pending:
            steps.append(Step(page, start, file_name=pending["file"], file_text="\n".join(body) + "\n"))
        elif lang in SHELL_FENCES or lang == "console":
            steps += _block_commands(body, start, page, lang, pending)
        pending = {}
    return steps


def _block_commands(body: list[str], start: int, page: str, lang: str, pending: dict[str, str]) -> list[Step]:
    out: list[Step] = []
    j = 0
    while j < len(body):
        cmd = _command_start(body[j], lang)
        if cmd is None:
            j += 1
            continue
        line = start + j + 1
        while cmd.rstrip().endswith("\\") and j + 1 < len(body):
            j += 1
            cmd = cmd.rstrip()[:-1] + " " + body[j].strip()
        j += 1
        out.append(Step(page, line, cmd, pending.get("skip", ""), int(pending.get("exit", "0") or 0)))
    return out


def all_steps() -> list[Step]:
    steps: list[Step] = []
    for path in PAGES:
        steps += parse_page(path.read_text(), path.relative_to(ROOT).as_posix())
    return steps


STEPS = all_steps()
COMMANDS = [s for s in STEPS if s.command]


# --- keeping a command small -----------------------------------------------------------------------


def _split_top(values: str) -> list[str]:
    """`a,[b,c],d` -> ['a', '[b,c]', 'd']: commas inside brackets or braces belong to a value."""
    out, depth, cur = [], 0, ""
    for ch in values:
        depth += ch in "[{"
        depth -= ch in "]}"
        if ch == "," and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    return [*out, cur]


def _trim_over(item: str) -> str:
    key, _, values = item.partition("=")
    lo, dots, hi = values.partition("..")
    if dots and lo.strip().isdigit() and hi.strip().isdigit():
        return f"{key}={lo}..{min(int(hi), int(lo) * 4)}"
    return f"{key}={','.join(_split_top(values)[:2])}"


def _params(sub: str, args: list[str]) -> dict:
    import typer

    from kvbench import cli

    cli._register_subcommands()
    group = typer.main.get_command(cli.app)
    ctx = group.commands[sub].make_context(sub, list(args), resilient_parsing=True)  # type: ignore[attr-defined]
    return dict(ctx.params)


def _keys_set(params: dict) -> set[str]:
    from kvbench.configfile import flag_keys
    from kvbench.scenario import Scenario

    keys = {key for name, key in flag_keys(Scenario).items() if params.get(name) not in (None, False)}
    for name in ("set_values", "over", "baseline_set"):
        keys |= {item.partition("=")[0].strip() for item in params.get(name) or []}
    return keys


def _test_kind(scenario: str, where: Path) -> str:
    from kvbench.scenario import load_scenario

    local = where / scenario
    scn, _ = load_scenario(str(local) if local.is_file() else scenario)
    return scn.test.kind


def small(argv: list[str], where: Path) -> list[str]:
    """The command as the test runs it: `kvbench run|sweep` kept small (see the module docstring)."""
    sub = argv[1] if len(argv) > 1 else ""
    if sub not in ("run", "sweep") or "--help" in argv:
        return argv
    args = argv[2:]
    if sub == "sweep":
        args = [_trim_over(a) if i and args[i - 1] == "--over" else a for i, a in enumerate(args)]
    params = _params(sub, args)
    extra = ["--quiet"] + (["--no-report"] if sub == "run" else [])
    if "--search" in args and "--max-repeats" not in args:
        extra += ["--max-repeats", "1"]  # one run per probed load: the search still bisects
    scenario = params.get("scenario")
    if scenario:
        mentioned = _keys_set(params)
        open_loop = params.get("rate") is not None or params.get("request_rate") is not None
        if open_loop or "load.kind" in mentioned:
            mentioned.add("load.concurrency")  # an open-loop or retyped load has no closed-loop width
        for key, value in SMALL.get(_test_kind(scenario, where), {}).items():
            if not any(m == key or m.startswith(key + ".") or key.startswith(m + ".") for m in mentioned):
                extra += ["--set", f"{key}={value}"]
    return [argv[0], sub, *args, *extra]


# --- running a page --------------------------------------------------------------------------------


@dataclass
class Page:
    where: Path
    done: int = 0  # steps of this page already run
    runs: list[Path] = field(default_factory=list)
    sweeps: list[Path] = field(default_factory=list)

    def note_new_dirs(self) -> None:
        results = self.where / "results"
        if not results.is_dir():
            return
        known = set(self.runs) | set(self.sweeps)
        for d in sorted(p for p in results.iterdir() if p.is_dir() and p not in known):
            if (d / "sweep.json").is_file():
                self.sweeps.append(d)
            elif (d / "manifest.json").is_file():  # not a compare-* folder
                self.runs.append(d)


class DocMock:
    """The server `http://127.0.0.1:8000` stands for: the kvbench mock on a free port, started once."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen[str] | None = None
        self.url = ""

    def get(self) -> str:
        if self.proc is None:
            self.proc, info = _start_mock([], "ci")
            self.url = info["base_url"]
        return self.url

    def stop(self) -> None:
        if self.proc is not None:
            _stop(self.proc)


def _kvbench() -> list[str]:
    return [sys.executable, "-m", "kvbench"]


def _env() -> dict[str, str]:
    return {**os.environ, "COLUMNS": "120", "MPLBACKEND": "Agg", "NO_COLOR": "1"}


def _start_mock(args: list[str], profile: str, cwd: Path | None = None) -> tuple[subprocess.Popen[str], dict]:
    argv = [*_kvbench(), "mock", "serve", "--profile", profile, *args]
    argv += ["--port", "0", "--announce", "--exit-on-stdin-eof"]
    proc = subprocess.Popen(
        argv,
        cwd=cwd,
        env=_env(),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        if line.startswith("{"):
            return proc, json.loads(line)
    _stop(proc)
    raise AssertionError(f"`{shlex.join(argv)}` did not announce a listening mock (exit {proc.returncode})")


def _stop(proc: subprocess.Popen[str]) -> None:
    if proc.stdin is not None:
        proc.stdin.close()
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _fill_placeholders(command: str, page: Page, mock: DocMock) -> list[str]:
    # on the text, before splitting: a placeholder may hold spaces or an apostrophe
    names = list(dict.fromkeys(PLACEHOLDER.findall(command)))
    runs = [n for n in names if not n.startswith("sweep")]
    sweeps = [n for n in names if n.startswith("sweep")]
    bound: dict[str, Path] = {}
    for wanted, made, what in ((runs, page.runs, "run"), (sweeps, page.sweeps, "sweep")):
        if len(made) < len(wanted):
            raise AssertionError(f"needs {len(wanted)} {what}(s) made earlier on the page, has {len(made)}")
        bound |= dict(zip(wanted, made[len(made) - len(wanted) :], strict=True))
    command = PLACEHOLDER.sub(lambda m: shlex.quote(str(bound[m.group(1)])), command)
    return shlex.split(command.replace(DOC_URL, mock.get()) if DOC_URL in command else command, comments=True)


def run_step(step: Step, page: Page, mock: DocMock) -> str:
    """Run one step of a page; returns what it printed, raises AssertionError when it failed."""
    if step.file_name:
        (page.where / step.file_name).write_text(step.file_text)
        return ""
    argv = _fill_placeholders(step.command, page, mock)
    if argv[0] == "sudo" or any(t in ("|", "&&", ";", "||") for t in argv):
        raise AssertionError("one plain kvbench command per line (sudo, pipes and chains: a skipped block)")
    argv = small(argv, page.where)
    if argv[1:3] == ["mock", "serve"] and "--help" not in argv:
        proc, info = _start_mock(argv[3:], "ci", page.where)
        _stop(proc)
        assert info["base_url"].startswith("http://"), info
        return json.dumps(info)
    done = subprocess.run(
        [*_kvbench(), *argv[1:]],
        cwd=page.where,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        stdin=subprocess.DEVNULL,
    )
    page.note_new_dirs()
    output = done.stdout + done.stderr
    if done.returncode != step.exit_code:
        tail = "\n".join(output.splitlines()[-25:])
        raise AssertionError(
            f"{step.id}: `{step.command}` exited {done.returncode} (expected {step.exit_code})\n"
            f"ran as: {shlex.join(argv)}\n{tail}"
        )
    return output


@pytest.fixture(scope="module")
def doc_mock():
    mock = DocMock()
    yield mock
    mock.stop()


@pytest.fixture(scope="module")
def pages(tmp_path_factory) -> dict[str, Page]:
    made: dict[str, Page] = {}
    for path in PAGES:
        name = path.relative_to(ROOT).as_posix()
        made[name] = Page(tmp_path_factory.mktemp(path.stem.lower()))
    return made


@pytest.mark.parametrize("step", COMMANDS, ids=[s.id for s in COMMANDS])
def test_doc_command_runs(step: Step, pages: dict[str, Page], doc_mock: DocMock) -> None:
    if step.skip:
        pytest.skip(step.skip)
    page = pages[step.page]
    steps = [s for s in STEPS if s.page == step.page]
    me = steps.index(step)
    for earlier in steps[page.done : me]:  # a test picked alone: what the reader ran first
        if not earlier.skip:
            with contextlib.suppress(AssertionError):  # reported by its own test
                run_step(earlier, page, doc_mock)
    page.done = me + 1
    run_step(step, page, doc_mock)


# --- the conventions themselves, and the README's promises ------------------------------------------


def test_the_parser_reads_commands_directives_and_files() -> None:
    page = "\n".join(
        [
            "```bash",
            "kvbench run ttft   # a comment",
            "make run",
            "kvbench sweep throughput \\",
            "    --over load.concurrency=1,2",
            "```",
            "```text",
            "kvbench 0.1.0: ttft against mock (output, not a command)",
            "```",
            "```console",
            "$ kvbench audit",
            "kvbench: output line",
            "```",
            "<!-- doc-test: skip (needs Ray) -->",
            "```",
            "kvbench run throughput --cluster ray",
            "```",
            "<!-- doc-test: file claims.yaml -->",
            "```yaml",
            "schema: kvbench-claims/1",
            "```",
            "<!-- doc-test: exit 1 -->",
            "```bash",
            "$ kvbench audit claims.yaml --strict",
            "```",
        ]
    )
    steps = parse_page(page, "p.md")
    assert [(s.line, s.command, s.skip, s.exit_code, s.file_name) for s in steps] == [
        (2, "kvbench run ttft   # a comment", "", 0, ""),
        (4, "kvbench sweep throughput  --over load.concurrency=1,2", "", 0, ""),
        (11, "kvbench audit", "", 0, ""),
        (16, "kvbench run throughput --cluster ray", "needs Ray", 0, ""),
        (19, "", "", 0, "claims.yaml"),
        (24, "kvbench audit claims.yaml --strict", "", 1, ""),
    ]
    assert steps[4].file_text == "schema: kvbench-claims/1\n"


def test_small_keeps_what_a_command_sets_and_shrinks_the_rest(tmp_path: Path) -> None:
    argv = small(["kvbench", "run", "throughput", "--requests", "50", "--set", "prompts.count=3"], tmp_path)
    sets = [argv[i + 1] for i, a in enumerate(argv) if a == "--set"]
    assert "prompts.count=3" in sets and "load.requests=8" not in sets  # the doc's own values stay
    assert "load.concurrency=4" in sets and "prompts.lengths=[2000]" in sets
    assert "--no-report" in argv and "--quiet" in argv
    sweep = small(["kvbench", "sweep", "ttft", "--over", "working_set=4k,12k,[1,2],500k"], tmp_path)
    assert "working_set=4k,12k" in sweep
    search = small(
        ["kvbench", "sweep", "throughput", "--search", "goodput", "--over", "load.concurrency=1..32"],
        tmp_path,
    )
    assert "load.concurrency=1..4" in search
    assert small(["kvbench", "run", "--help"], tmp_path) == ["kvbench", "run", "--help"]


def test_every_command_of_the_docs_is_collected() -> None:
    # the README's three published tests are among them, and nothing that looks like a
    # command in a shell block is silently dropped
    readme = {s.command.split("#")[0].strip() for s in COMMANDS if s.page == "README.md"}
    for published in (
        "kvbench run ttft",
        "kvbench run throughput --baseline",
        "kvbench run throughput --noisy",
    ):
        assert published in readme
    assert all(s.skip for s in COMMANDS if s.command.startswith("sudo ")), "sudo outside a skipped block"


def test_readme_is_a_path_not_a_wall() -> None:
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 150
    for must in ("make run", "make test", "kvbench run ttft", "pip install", "pipx install"):
        assert must in text, must
    # CI runs exactly the README's test command
    test_command = next(ln.split("#")[0].strip() for ln in text.splitlines() if ln.startswith("make test"))
    ci_lines = [ln.strip() for ln in (ROOT / ".ci" / "run").read_text().splitlines()]
    assert test_command in ci_lines, test_command


def test_every_relative_link_in_the_docs_resolves() -> None:
    link = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")
    broken = []
    for path in PAGES:
        for target in link.findall(path.read_text()):
            if "://" in target or target.startswith("mailto:"):
                continue
            if not (path.parent / target).exists():
                broken.append(f"{path.relative_to(ROOT)} -> {target}")
    assert not broken, broken


def test_a_rotten_command_fails_naming_its_page_and_line(tmp_path: Path) -> None:
    mock = DocMock()
    with pytest.raises(AssertionError, match=r"p\.md:3: .*exited 2 \(expected 0\)"):
        run_step(Step("p.md", 3, "kvbench run ttft --no-such-flag"), Page(tmp_path), mock)
    with pytest.raises(AssertionError, match="needs 1 run"):  # nothing on the page made one
        run_step(Step("p.md", 4, "kvbench report results/<run>"), Page(tmp_path), mock)
    assert mock.proc is None  # no server was started for commands that do not name one
