"""rl-arrays: namedarraytuple, buffers and array utilities for [T, B] data.

Depends on numpy only; the torch helpers (``torchify_buffer``, ``buffer_to``, torch
dtypes in ``zeros`` / ``empty``, tensors in ``compress_normalized_image`` /
``decompress_image``) need PyTorch and say so when it is missing.
"""

from importlib.metadata import version as _version

from ._array_utils import (
    empty,
    extract_sequences,
    from_onehot,
    infer_leading_dims,
    iterate_mb_idxs,
    restore_leading_dims,
    select_at_indexes,
    to_onehot,
    valid_mean,
    zeros,
)
from ._buffer import (
    buffer_from_example,
    buffer_func,
    buffer_method,
    buffer_to,
    build_array,
    get_leading_dims,
    normalize_device,
    numpify_buffer,
    torchify_buffer,
)
from ._child_processes import CHILD_IGNORED_SIGNALS, enter_child, signals_held_for_children
from ._collections import (
    AttrDict,
    NamedArrayTuple,
    NamedArrayTupleSchema,
    NamedArrayTupleSchema_like,
    NamedTuple,
    NamedTupleSchema,
    is_namedarraytuple,
    is_namedarraytuple_class,
    is_namedtuple,
    is_namedtuple_class,
    namedarraytuple,
    namedarraytuple_like,
)
from ._compress import compress_normalized_image, decompress_image
from ._counts import as_count
from ._memory import available_memory, check_memory
from ._samples import (
    AgentInputs,
    AgentInputsRnn,
    AgentSamples,
    AgentSamplesBsv,
    AgentStep,
    BatchSpec,
    EnvSamples,
    EnvSpaces,
    EnvStep,
    Samples,
)
from ._shared_memory import np_mp_array

__version__ = _version("rl-arrays")

__all__ = [
    "CHILD_IGNORED_SIGNALS",
    "AgentInputs",
    "AgentInputsRnn",
    "AgentSamples",
    "AgentSamplesBsv",
    "AgentStep",
    "AttrDict",
    "BatchSpec",
    "EnvSamples",
    "EnvSpaces",
    "EnvStep",
    "NamedArrayTuple",
    "NamedArrayTupleSchema",
    "NamedArrayTupleSchema_like",
    "NamedTuple",
    "NamedTupleSchema",
    "Samples",
    "as_count",
    "available_memory",
    "buffer_from_example",
    "buffer_func",
    "buffer_method",
    "buffer_to",
    "build_array",
    "check_memory",
    "compress_normalized_image",
    "decompress_image",
    "empty",
    "enter_child",
    "extract_sequences",
    "from_onehot",
    "get_leading_dims",
    "infer_leading_dims",
    "is_namedarraytuple",
    "is_namedarraytuple_class",
    "is_namedtuple",
    "is_namedtuple_class",
    "iterate_mb_idxs",
    "namedarraytuple",
    "namedarraytuple_like",
    "normalize_device",
    "np_mp_array",
    "numpify_buffer",
    "restore_leading_dims",
    "select_at_indexes",
    "signals_held_for_children",
    "to_onehot",
    "torchify_buffer",
    "valid_mean",
    "zeros",
]
