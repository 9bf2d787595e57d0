"""Layer ``dynamo``: the knobs of ``graphgrad.compile`` (as ``torch._dynamo.config``).

Change them at run time: ``graphgrad.dynamo.config.recompile_limit = 4``.
"""

# cached root entries per compiled function before it falls back to eager (Dynamo's
# cache_size_limit); also the most variants kept after one graph break
recompile_limit: int = 8
# deepest chain of inlined Python calls
max_inline_depth: int = 32
# instructions one segment may interpret (a long Python loop is unrolled into the graph)
max_instructions: int = 200_000
# segments one call may capture (a loop with a graph break in each iteration that
# changes Python state every time); past it the rest of the call runs on real values
max_segments_per_call: int = 64
# mark changed dims dynamic after a shape-changing recompile (Dynamo's automatic_dynamic)
automatic_dynamic_shapes: bool = True
# an error inside the capture machinery falls back to running the code for real; set
# False to see it instead (tests do)
suppress_errors: bool = True
# check every handler's stack effect against dis.stack_effect (a bug detector; tests)
check_stack_effect: bool = False
