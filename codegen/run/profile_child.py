"""The process `tilegen profile` runs under the profiler (ncu / rocprofv3): one subject -- the generated
kernel or one torch baseline -- at one shape, compiled and fed as verify/bench do (codegen.run.gpu.compile_kernel,
the family's Numerics make_inputs / launch / baselines).

`python -m codegen.run.profile_child ROOT URI SHAPE SUBJECT [RENDERED]` with SUBJECT `kernel` or `baseline:<name>`;
SUBJECT `names` prints the family's baseline names as one JSON line and runs nothing. RENDERED: a pickled
RenderedFile to run instead of looking URI up in ROOT's specs (a `tilegen tune` candidate is in no spec).
The subject runs WARMUP times unprofiled (compilation, torch.compile, caches), then once inside the NVTX
range `tilegen_profile` that ncu is told to profile (`--nvtx-include tilegen_profile/`); rocprofv3 filters
the kernel by its symbol instead.
"""

from __future__ import annotations

import sys
from pathlib import Path

NVTX_RANGE = "tilegen_profile"
WARMUP = 2


def main(argv: list[str]) -> int:
    root, uri, shape_text, subject = argv[:4]
    import torch

    from codegen.families import family
    from codegen.generate.pipeline import Project
    from codegen.run.gpu import compile_kernel, detect_gpu
    from codegen.targets import torch_dtype

    if len(argv) > 4:
        import pickle

        rendered = pickle.loads(Path(argv[4]).read_bytes())  # written by codegen.run.profile for this run
    else:
        (rendered,) = [f for f in Project(root=Path(root)).select([uri], all_=False, targets=None) if f.uri == uri][:1]
    inst = rendered.instance
    shape = tuple(int(v) for v in shape_text.split("x"))
    run_target = detect_gpu().run_target
    fam = family(inst).numerics
    case = fam.make_inputs(inst, shape, seed=0, kind="normal", device="cuda", run_target=run_target)
    out_dtype = torch_dtype(inst.spec_dtypes[-2], run_target)
    outs = fam.alloc_outputs(inst, shape, run_target, fill=None)
    if subject == "names":
        import json

        print(json.dumps(sorted(fam.baselines(inst, case, out_dtype))))
        return 0
    if subject == "kernel":
        kernel = compile_kernel(rendered, shape, run_target)

        def fn():
            fam.launch(kernel, case, *outs)
    else:
        fn = fam.baselines(inst, case, out_dtype)[subject.removeprefix("baseline:")]
    for _ in range(WARMUP):
        fn()
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_push(NVTX_RANGE)
    fn()
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_pop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
