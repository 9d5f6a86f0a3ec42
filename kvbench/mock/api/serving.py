"""What answering a completion needs of the mock server: its state, and the validated request.

app.py owns the server (`MockApp`: state, routes, small endpoints), completions.py takes a
request from arrival to answer and responses.py runs the token loop. The two handlers need the
server's state, not the server class, and share the validated request; both live here, below
the three, so that imports only go downward: app -> completions -> responses -> serving.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, Protocol

from kvbench.mock.api.body_memo import BodyMemo
from kvbench.mock.config import FixedDelayProfile, TieredProfile
from kvbench.mock.costs.engine import FixedDelayEngine, TieredEngine, Trace
from kvbench.mock.faults import FaultPlan
from kvbench.mock.metrics import MockMetrics
from kvbench.mock.tokenizer import PromptInfo, Tokenizer


class ServerState(Protocol):
    """The part of `MockApp` a completion handler reads and updates."""

    profile: TieredProfile | FixedDelayProfile
    engine: TieredEngine | FixedDelayEngine
    tokenizer: Tokenizer
    body_memo: BodyMemo[Any]  # validated requests by raw body (completions.py)
    faults: FaultPlan
    metrics: MockMetrics
    exit_process_on_fault: bool
    in_flight: int

    def write_trace(self, trace: Trace) -> None: ...

    def count_token(self) -> None: ...


@dataclass(frozen=True)
class CompletionRequest:
    """A validated completion request: what the token loop and the body writers need."""

    chat: bool  # /v1/chat/completions (messages) rather than /v1/completions (prompt)
    prompt: PromptInfo  # the prompt as the mock's tokenizer sees it
    max_tokens: int  # tokens to generate (the mock never stops early)
    stream: bool  # SSE stream, or one JSON body
    include_usage: bool  # stream_options.include_usage: a usage chunk before [DONE]
    model: str  # echoed in every answer (any value is accepted)
    words: random.Random  # draws the answer's words (seeded from the prompt at temperature 0)
