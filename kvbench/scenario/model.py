"""The scenario: shared sections, the load, the noise and one test section, checked together."""

from __future__ import annotations

from typing import Any

from pydantic import Field, model_validator

from kvbench.scenario.cluster import ClusterSection
from kvbench.scenario.load import Load, SequentialLoad
from kvbench.scenario.noise import Noise, NoNoise
from kvbench.scenario.sections import Cache, Output, Prompts, Strict, Target, Telemetry, flag, reuse_problem
from kvbench.scenario.slo import Slo, slo_problem
from kvbench.scenario.testtypes import SECTIONS, TestSection


class Scenario(Strict):
    name: str = Field(..., min_length=1, max_length=80, description="Short name, used in the run directory.")
    description: str = Field("", description="What this scenario reproduces.")
    test: TestSection = Field(
        ..., description="Which test this runs, with its own knobs: `ttft`, `throughput` or {kind: ..., ...}."
    )
    target: Target = Field(default_factory=Target, description="The server under test.")
    prompts: Prompts = Field(..., description="The prompt set.")
    load: Load = Field(default_factory=SequentialLoad, description="How requests are issued.")
    output: Output = Field(default_factory=Output, description="Generation settings.")
    cache: Cache = Field(default_factory=Cache, description="Cache state and control.")
    noise: Noise = Field(default_factory=NoNoise, description="Background traffic for noisy phases.")
    telemetry: Telemetry = Field(default_factory=Telemetry, description="Server metrics scraping.")
    cluster: ClusterSection = Field(
        default_factory=ClusterSection, description="Where noise clients and load workers run (local | ray)."
    )
    repetitions: int = Field(
        1,
        gt=0,
        le=1000,
        description="Repeat the whole measurement this many times.",
        json_schema_extra=flag("repetitions"),
    )
    max_error_rate: float = Field(
        0.0,
        ge=0,
        le=1,
        description="Failed-request fraction still counted a pass.",
        json_schema_extra=flag("max_error_rate"),
    )
    retries: int = Field(
        0,
        ge=0,
        le=10,
        description="Retries per failed request (off by default: retries distort timing).",
        json_schema_extra=flag("retries"),
    )
    reference: str | None = Field("ibm-g4", description="Published dataset to compare against, or null.")
    slo: Slo | None = Field(None, description="Latency bounds for attainment and goodput (--slo overrides).")

    @model_validator(mode="before")
    @classmethod
    def _default_prompts(cls, data: Any) -> Any:
        # a test whose prompts come from elsewhere (replay: the trace) may leave `prompts` out
        if not isinstance(data, dict):
            return data
        test = data.get("test")
        kind = test.get("kind") if isinstance(test, dict) else test
        section = SECTIONS.get(kind) if isinstance(kind, str) else None
        default = section.default_prompts if section is not None else None
        prompts = data.get("prompts")
        if default is not None and (prompts is None or isinstance(prompts, dict)):
            data = {**data, "prompts": {**default, **(prompts or {})}}
        return data

    @model_validator(mode="after")
    def _consistent(self) -> Scenario:
        self.test.check(self)
        if self.cluster.backend != "ray" and getattr(self.noise, "clients", 1) > 1:
            raise ValueError("noise.clients: more than one noise client needs cluster.backend: ray")
        if self.load.pin and not self.load.workers:
            raise ValueError("load.pin: pins local load workers to cores; set load.workers to 1 or more")
        if self.load.pin and self.cluster.backend == "ray":
            raise ValueError("load.pin: Ray places its own load workers; pin is for local worker processes")
        problem = self.context_problem(self.target.max_model_len, "target.max_model_len")
        if problem is None and self.slo is not None:
            problem = slo_problem(self.slo.bounds(), self.output.max_tokens, "slo:")
        problem = problem or reuse_problem(self.prompts, self.test, self.load)
        if problem:
            raise ValueError(problem)
        shared = self.prompts.shared_prefix_tokens
        if shared and isinstance(self.prompts.lengths, list) and shared >= min(self.prompts.lengths):
            raise ValueError("prompts.shared_prefix_tokens: must be shorter than the shortest prompt")
        return self

    def context_problem(self, max_len: int | None, what: str) -> str | None:
        """The one context-length rule (checked at validation and again with the server's figure)."""
        need = self.prompts.max_length() + self.output.max_tokens
        if max_len is None or need <= max_len:
            return None
        return f"prompts.lengths: longest prompt + max_tokens = {need} exceeds {what} {max_len}"

    @property
    def test_name(self) -> str:
        return self.test.kind
