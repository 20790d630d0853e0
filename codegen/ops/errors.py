"""What the ops raise and warn."""

from __future__ import annotations

from codegen.core.errors import TilegenError


class OpsError(TilegenError):
    """The ops cannot be used as asked: no GPU, a project that does not load, an Ops object that is gone."""


class OpsInputError(OpsError, ValueError):
    """A call's tensors are not what the op takes (dtype, device, layout, contiguity, sizes): never computed."""


class NoKernelError(OpsError):
    """strict mode: no kernel of the project serves this call (the message says why); without strict mode the
    call runs its torch fallback and a FallbackWarning says the same, once per shape."""


class FallbackWarning(UserWarning):
    """A call ran the op's torch fallback: no kernel of the project serves its shape (said once per shape)."""
