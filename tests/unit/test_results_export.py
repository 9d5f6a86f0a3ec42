import json
import shutil
import sys
from pathlib import Path

import pandas as pd
import pytest

from kvbench.cli import main
from kvbench.results import JsonlWriter, load_run, read_jsonl

FIXTURES = Path(__file__).resolve().parents[1] / "data" / "fixture_runs"


def test_rows_are_flushed_as_written(tmp_path):
    w = JsonlWriter(tmp_path / "r.jsonl")
    w.write({"a": 1})
    # visible to another reader before close: a crash right now loses nothing
    assert read_jsonl(tmp_path / "r.jsonl") == [{"a": 1}]
    w.close()


def test_a_torn_line_in_the_middle_is_an_error(tmp_path):
    (tmp_path / "r.jsonl").write_text('{"a": 1}\n{"a": \n{"a": 3}\n')
    with pytest.raises(ValueError, match="line 2"):
        read_jsonl(tmp_path / "r.jsonl")


def test_export_csv_roundtrip(tmp_path, monkeypatch, capsys):
    src = next(p for p in FIXTURES.iterdir() if (p / "requests.jsonl").exists() and "ttft" in p.name)
    run = tmp_path / src.name
    shutil.copytree(src, run)
    monkeypatch.setattr(sys, "argv", ["kvbench", "export", str(run), "--format", "csv"])
    main()
    csv = pd.read_csv(run / "requests.csv")
    df = load_run(run)
    assert len(csv) == len(df) and list(csv.columns) == list(df.columns)
    assert json.loads(csv.token_ns.iloc[0]) == df.token_ns.iloc[0]


def test_parquet_without_pyarrow_is_a_hint(tmp_path, monkeypatch, capsys):
    src = next(p for p in FIXTURES.iterdir() if (p / "requests.jsonl").exists())
    run = tmp_path / src.name
    shutil.copytree(src, run)
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    monkeypatch.setattr(sys, "argv", ["kvbench", "export", str(run), "--format", "parquet"])
    with pytest.raises(SystemExit) as exc:
        main()
    assert exc.value.code == 2
    assert "pip install 'kvbench[parquet]'" in capsys.readouterr().err
