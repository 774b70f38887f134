"""Prometheus metrics (text format at ``/metrics``), one registry per app.

Gauges that the engine knows (running / waiting requests, KV usage, cache hit rate)
are read from ``Engine.get_server_info()`` when scraped and kept current by
``observe_step``, the engine step observer the app registers: it also fills the
per-step histograms (batch size in requests and tokens, running / waiting requests) and
the per-request cached-token fraction. It runs on the engine's scheduler thread
(prometheus_client is thread-safe). Latencies and token counts are observed by the
server as requests stream through it (``RequestTimer``). Names follow vLLM's (``furca_``
instead of ``vllm:``), or SGLang's where vLLM has none; docs/server.md lists them.
"""

from __future__ import annotations

import time
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client import CONTENT_TYPE_LATEST  # noqa: F401 - re-exported for the route

_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 40, 80, 160)
_STEP_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
_TOKEN_BUCKETS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)  # vLLM's iteration buckets
_REQUEST_BUCKETS = (0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
_FRACTION_BUCKETS = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.99, 1.0)


class Metrics:
    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self.num_running = Gauge("furca_num_requests_running", "Requests running in the engine", registry=r)
        self.num_waiting = Gauge("furca_num_requests_waiting", "Requests queued in the engine", registry=r)
        self.num_inflight = Gauge("furca_num_requests_inflight", "Requests admitted by the HTTP server",
                                  registry=r)
        self.kv_usage = Gauge("furca_kv_cache_usage_perc", "Fraction of KV slots in use (not evictable)",
                              registry=r)
        self.cache_hit_rate = Gauge("furca_prefix_cache_hit_rate", "Cached prompt tokens / prompt tokens",
                                    registry=r)
        self.prefix_queries = Gauge("furca_prefix_cache_queries", "Prompt tokens admitted", registry=r)
        self.prefix_hits = Gauge("furca_prefix_cache_hits", "Prompt tokens found in the cache", registry=r)
        self.ttft = Histogram("furca_time_to_first_token_seconds", "Time to first token",
                              buckets=_LATENCY_BUCKETS, registry=r)
        self.itl = Histogram("furca_inter_token_latency_seconds", "Time between output chunks, per token",
                             buckets=_LATENCY_BUCKETS, registry=r)
        self.e2e = Histogram("furca_e2e_request_latency_seconds", "Request latency, arrival to last token",
                             buckets=_LATENCY_BUCKETS, registry=r)
        self.grammar_compile = Histogram("furca_grammar_compile_seconds", "Constraint compile time",
                                         buckets=_LATENCY_BUCKETS, registry=r)
        self.prompt_tokens = Counter("furca_prompt_tokens", "Prompt tokens processed", registry=r)
        self.generation_tokens = Counter("furca_generation_tokens", "Tokens generated", registry=r)
        self.requests = Counter("furca_requests", "Finished requests by finish reason", ["finish_reason"],
                                registry=r)
        self.rejected = Counter("furca_requests_rejected", "Requests refused before running", ["status"],
                                registry=r)
        # per engine step (forward pass), from the step observer
        self.iteration_tokens = Histogram("furca_iteration_tokens_total", "Tokens computed per engine step "
                                          "(prefill + decode)", buckets=_TOKEN_BUCKETS, registry=r)
        self.iteration_requests = Histogram("furca_iteration_requests", "Requests per engine step (batch size)",
                                            buckets=_REQUEST_BUCKETS, registry=r)
        self.iteration_decode = Histogram("furca_iteration_decode_requests", "Decoding requests per engine step",
                                          buckets=_REQUEST_BUCKETS, registry=r)
        self.iteration_prefill_tokens = Histogram("furca_iteration_prefill_tokens", "Prompt tokens computed per "
                                                  "engine step", buckets=_TOKEN_BUCKETS, registry=r)
        self.iteration_running = Histogram("furca_iteration_running_requests", "Requests running after each "
                                           "engine step", buckets=_REQUEST_BUCKETS, registry=r)
        self.iteration_waiting = Histogram("furca_iteration_waiting_requests", "Requests queued in the engine "
                                           "after each engine step", buckets=_REQUEST_BUCKETS, registry=r)
        self.iteration_seconds = Histogram("furca_iteration_seconds", "Wall time of an engine step (schedule, "
                                           "forward, sample)", buckets=_STEP_BUCKETS, registry=r)
        self.cached_fraction = Histogram("furca_request_cached_tokens_fraction", "Per request: prompt tokens "
                                         "found in the prefix cache / prompt tokens", buckets=_FRACTION_BUCKETS,
                                         registry=r)
        self.retracted = Counter("furca_num_retracted_requests", "Requests retracted (KV given back, "
                                 "recomputed later) when the KV pool ran short", registry=r)
        self.new_token_ratio = Gauge("furca_new_token_ratio", "Fraction of max_new_tokens the scheduler "
                                     "reserves for admitted requests", registry=r)
        self.sessions_open = Gauge("furca_sessions_open", "Sessions open (/open_session)", registry=r)
        self.pinned_tokens = Gauge("furca_pinned_tokens", "KV tokens pinned by sessions", registry=r)
        self.pins_refused = Gauge("furca_session_pins_refused", "Session pins refused as past --pinned-share, "
                                  "since start", registry=r)
        self.spec_draft_tokens = Gauge("furca_spec_draft_tokens", "Speculative draft tokens verified, since start",
                                       registry=r)
        self.spec_accepted_tokens = Gauge("furca_spec_accepted_tokens", "Speculative draft tokens accepted, "
                                          "since start", registry=r)
        self.spec_accept_rate = Gauge("furca_spec_accept_rate", "Accepted / verified speculative draft tokens, "
                                      "since start", registry=r)

    def observe_step(self, s: Any) -> None:
        """The engine's step observer (`furca.runtime.step_stats.StepStats`); called on the
        scheduler thread after every forward pass."""
        self.iteration_tokens.observe(s.num_tokens)
        self.iteration_requests.observe(s.num_reqs)
        self.iteration_decode.observe(s.num_decode_reqs)
        self.iteration_prefill_tokens.observe(s.num_prefill_tokens)
        self.iteration_running.observe(s.num_running)
        self.iteration_waiting.observe(s.num_waiting)
        self.iteration_seconds.observe(s.duration_s)
        for prompt, cached in s.admitted:
            self.cached_fraction.observe(cached / prompt if prompt else 0.0)
        if s.num_retracted:
            self.retracted.inc(s.num_retracted)
        self.num_running.set(s.num_running)
        self.num_waiting.set(s.num_waiting)
        if s.capacity:
            self.kv_usage.set(s.used_tokens / s.capacity)
        self.new_token_ratio.set(s.new_token_ratio)

    def update_from_engine(self, info: dict[str, Any]) -> None:
        capacity = info.get("capacity") or info.get("max_total_tokens") or 0
        self.num_running.set(info.get("num_running", 0))
        self.num_waiting.set(info.get("num_waiting", 0))
        if capacity:
            self.kv_usage.set(info.get("used_tokens", 0) / capacity)
        self.cache_hit_rate.set(info.get("cache_hit_rate", 0.0))
        if "new_token_ratio" in info:
            self.new_token_ratio.set(info["new_token_ratio"])
        stats = info.get("stats", {})
        self.prefix_queries.set(stats.get("prompt_tokens", 0))
        self.prefix_hits.set(stats.get("cached_tokens", 0))
        drafted = stats.get("spec_draft_tokens", 0)
        self.spec_draft_tokens.set(drafted)
        self.spec_accepted_tokens.set(stats.get("spec_accepted_tokens", 0))
        self.spec_accept_rate.set(stats.get("spec_accepted_tokens", 0) / drafted if drafted else 0.0)
        sessions = info.get("sessions", {})
        self.sessions_open.set(sessions.get("open", 0))
        self.pins_refused.set(sessions.get("pins_refused", 0))
        self.pinned_tokens.set(info.get("pinned", 0))

    def render(self) -> bytes:
        return generate_latest(self.registry)


class RequestTimer:
    """Per engine request: TTFT at its first token, ITL per later token, e2e at the end."""

    __slots__ = ("metrics", "start", "last", "num_tokens")

    def __init__(self, metrics: Metrics, start: float):
        self.metrics, self.start, self.last, self.num_tokens = metrics, start, None, 0

    def on_tokens(self, num: int) -> None:
        if num <= 0:
            return
        now = time.perf_counter()
        if self.last is None:
            self.metrics.ttft.observe(now - self.start)
        else:
            per = (now - self.last) / num
            for _ in range(num):
                self.metrics.itl.observe(per)
        self.last = now
        self.num_tokens += num

    def on_finish(self, meta: dict[str, Any]) -> None:
        self.metrics.e2e.observe(time.perf_counter() - self.start)
        self.metrics.generation_tokens.inc(meta.get("completion_tokens", self.num_tokens))
        reason = (meta.get("finish_reason") or {}).get("type", "unknown")
        self.metrics.requests.labels(finish_reason=reason).inc()
