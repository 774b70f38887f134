"""Delivering a request's results: stream deltas, the final `Output`, and the failure of a
request (`fail`). A mixin of `Postprocessor` (it uses its ``tokenizer`` and
``jump_forward``); runs on the scheduler thread, after the request's KV is given back
when it is the final result.
"""

from __future__ import annotations

from furca.errors import RequestFailedError
from furca.runtime.output import (
    Output,
    StreamDelta,
    build_meta_info,
    finish_abort,
    logprob_entries,
    top_logprob_entries,
)
from furca.runtime.request import Req


class Delivery:
    tokenizer: object
    jump_forward: object
    faults: object

    # -- streaming -----------------------------------------------------------------------

    def _decoder(self, req: Req):
        if not req.params.return_text_in_logprobs:
            return None
        return lambda t: self.tokenizer.decode([t], skip_special_tokens=False)

    def _delta(self, req: Req, meta: dict | None = None, full: dict | None = None) -> StreamDelta:
        """The request's next `StreamDelta` (its pending text and ids, the logprobs known
        since the last one); empties the stream buffer. ``meta`` makes it the final delta;
        ``full``: the final meta_info's logprob lists, sliced instead of decoded again."""
        p, lp, buf = req.params, req.logprobs, req.stream_buf
        cursor = lp.cursor
        logprobs: dict = {}
        if p.return_logprob:
            retract, start = cursor.take(len(lp.output_tokens))
            decode = self._decoder(req)
            logprobs["logprob_retract"] = retract
            if full is not None:
                logprobs["output_token_logprobs"] = full["output_token_logprobs"][start:]
            else:
                logprobs["output_token_logprobs"] = logprob_entries(lp.output_tokens[start:], decode)
            if p.top_logprobs_num > 0:
                logprobs["output_top_logprobs"] = (full["output_top_logprobs"][start:] if full is not None else
                                                   top_logprob_entries(lp.output_top[start:], decode))
            if req.wants_prompt_logprobs and not cursor.input_sent:
                cursor.input_sent = True
                logprobs["input_token_logprobs"] = (full["input_token_logprobs"] if full is not None else
                                                    logprob_entries(lp.input_tokens, decode))
                if p.top_logprobs_num > 0:
                    logprobs["input_top_logprobs"] = (full["input_top_logprobs"] if full is not None else
                                                      top_logprob_entries(lp.input_top, decode))
        settled = None
        if req.grammar is not None and self.jump_forward is not None and meta is None:
            settled = self.jump_forward.settled(req)
        delta = StreamDelta(req.rid, buf.text, buf.ids, finished=meta is not None, meta_info=meta,
                            index=req.sample_index, group_rid=req.group_rid, retract=buf.retract,
                            settled=settled, **logprobs)
        buf.num_streamed += len(buf.ids) - buf.retract
        buf.clear()
        return delta

    # -- finishing -----------------------------------------------------------------------

    def end(self, req: Req, reason: dict) -> None:
        """Mark `req` finished for `reason` (its text ends here); delivers nothing."""
        req.stream_buf.text += req.detok.finish(reason)  # "" if the detokenizer already stopped
        req.finished_reason = reason

    def finish(self, req: Req, reason: dict) -> None:
        """End `req` now (abort) and deliver its result."""
        self.end(req, reason)
        self.emit_final(req)

    def fail(self, req: Req, err: RequestFailedError) -> None:
        """Deliver ``err`` for ``req`` (failed; its KV already given back): a stream gets a
        final delta with finish reason abort (its message is ``err``'s), a caller waiting
        for the whole output gets ``err``. Nothing pending is sent: it may be inconsistent."""
        req.finished_reason = finish_abort(str(err))
        if not req.stream:
            req.emit(err)
            return
        meta = build_meta_info(req.rid, prompt_tokens=req.prompt_len, completion_tokens=req.stream_buf.num_streamed,
                               cached_tokens=req.cached_tokens, finish_reason=req.finished_reason)
        meta["e2e_latency"] = req.e2e_latency
        req.stream_buf.clear()
        req.emit(StreamDelta(req.rid, "", [], finished=True, meta_info=meta, index=req.sample_index,
                             group_rid=req.group_rid))

    def emit_final(self, req: Req) -> None:
        if self.faults is not None:
            self.faults.check("output", req)
        p, lp = req.params, req.logprobs
        decode = self._decoder(req)
        logprobs = {}
        if p.return_logprob:
            logprobs = {
                "input_token_logprobs": logprob_entries(lp.input_tokens, decode),
                "output_token_logprobs": logprob_entries(lp.output_tokens, decode),
            }
            if p.top_logprobs_num > 0:
                logprobs["input_top_logprobs"] = top_logprob_entries(lp.input_top, decode)
                logprobs["output_top_logprobs"] = top_logprob_entries(lp.output_top, decode)
        meta = build_meta_info(
            req.rid,
            prompt_tokens=req.prompt_len,
            completion_tokens=len(req.output_ids),
            cached_tokens=req.cached_tokens,
            finish_reason=req.finished_reason,
            **logprobs,
        )
        meta["e2e_latency"] = req.e2e_latency
        if req.session_meta is not None:
            meta.update(req.session_meta)
        if req.spec is not None:
            meta.update(req.spec.meta_info())
        if req.grammar is not None:
            meta["jump_forward_tokens"] = req.jump.forced_tokens
            meta["jump_forward_retokenized"] = req.jump.dropped_tokens
        if req.stream:
            out = self._delta(req, meta, logprobs)
        else:
            out = Output(req.rid, req.detok.text, list(req.output_ids), meta)
            req.stream_buf.clear()
        req.emit(out)
