"""Names vulture would call unused that are used: public API, called by a framework, or
specified and tested on their own. Never run; vulture reads each line as a use of the
name. One line per name, with the reason. tests/test_dead_code.py checks the rest.
"""
# ruff: noqa
# fmt: off

# kernels: each kernel's plain-torch specification, what tests/kernels compares it with
decode_attention_ref
extend_attention_ref
store_kv_ref
apply_token_bitmask_ref
int4_matmul_ref
int8_matmul_ref
fp8_matmul_ref
# kernels: the quantized-matmul API a quantized linear calls on CUDA (tests and the GPU
# bench call it here: no CUDA path in the runtime calls it yet)
int4_matmul
int8_matmul
fp8_matmul
pack_int4
pack_int8
quantize_fp8
pack_fp8

# constrain: the public API of Matcher, CompiledGrammar, GrammarCompiler and TokenizerInfo
# (xgrammar's names; furca/constrain/DESIGN.md, tests/constrain)
_.clear_cache  # GrammarCompiler.clear_cache: drops the compiled-grammar cache
_.memory_size_bytes  # CompiledGrammar.memory_size_bytes
_.is_error  # Matcher.is_error: the sticky error state
_.can_terminate  # Matcher.can_terminate: whether EOS would be accepted now
_.num_accepted  # Matcher.num_accepted
_.get_allowed_tokens  # Matcher.get_allowed_tokens: the mask as token ids
_.accept_string  # Matcher.accept_string: advance by text rather than token ids
_.from_tokenizer_json  # TokenizerInfo.from_tokenizer_json: build from a tokenizer.json file

# lang: public DSL names, several of them SGLang's own (programs written for SGLang use them)
Runtime  # furca.Runtime, exported by name through furca.lang's lazy __getattr__
_.get_model_name  # SGLang's RuntimeEndpoint.get_model_name
_.run_batch  # SGLang's program.run_batch
_.ret_value  # SGLang's ProgramState.ret_value: what the program function returned
_.stream_executor  # SGLang's name for a state's executor
position_ids_offset  # SGLang's fork/copy keyword, accepted and ignored
_.text_iter  # SGLang's streaming API
_.text_async_iter  # SGLang's streaming API
_.var_scope  # SGLang's s.var_scope(name)
_.of_kind  # Graph API (docs/lang.md, Tracing)
_.kinds  # Graph API
_.to_dot  # Graph API: a program's graph as Graphviz text

# runtime/mask_overlap: MaskTimes fields, StepStats.masks for step observers (bench/constrained_step.py, tests)
num_masks  # MaskTimes.num_masks
num_late  # MaskTimes.num_late: requests that waited a step for their mask
num_early  # MaskTimes.num_early: masks started right after the previous step's accept
accept_s  # MaskTimes.accept_s

# runtime/grammar_backend
_.is_ready  # GrammarBackend.is_ready: whether the tokenizer tables are built (tests/runtime)

# radix
_.pretty_print  # RadixCache's tree as text, for debugging (tests/radix)

# runtime
_._finalizer  # Engine's weakref.finalize handle: stops the scheduler thread of an engine nobody references
_stop_live_loops  # registered with @atexit.register: stops engines nobody shut down
_.set_fault_injector  # Engine API for tests (docs/runtime.md, "Fault injection")
_.raised  # FaultInjector.raised: faults raised so far, read by tests/runtime/test_fault_isolation.py
_.model_max_length  # set on the transformers tokenizer built from a GGUF; transformers reads it
_.pre_tokenizer  # set on the tokenizers.Tokenizer built from a GGUF; tokenizers reads it
_.post_processor  # likewise
num_finished  # StepStats field: step observers' API (docs/runtime.md, "Step observers")
_.special_token_ids  # Tokenizer API (bench/vs_transformers.py draws prompts without them)
_.add_bos_token  # Tokenizer API, tested in tests/runtime/test_loader.py
_.get_source_stamp  # numba's cache-locator hook (runtime/numba_cache.py), called by numba

# runtime/quant
_.extra_repr  # nn.Module's repr hook (QuantLinear)

# runtime/attention
typingctx  # numba's @intrinsic passes the typing context first

# server: what uvicorn and starlette read or call
_.should_exit  # uvicorn.Server polls it
_.force_exit  # uvicorn.Server reads it
_.handle_exit  # uvicorn.Server's signal handler, overridden
_._drain_task  # keeps the drain task referenced (asyncio holds tasks weakly)
media_type  # starlette.Response reads it
_.background  # starlette.Response reads it

# server: request fields declared so the schema documents them (accepted and ignored, or refused)
description  # OpenAI's function and json_schema descriptions
sampling_seed  # SGLang's native sampling keys
json_object
beam_width
watermark
custom_params
capacity_of_str_len  # SGLang's /open_session fields (sessions_api.py)
streaming
