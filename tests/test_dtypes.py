"""The one table of dtype names (tunelab.dtypes) and the families and ops that use it."""
import pytest

from tunelab import dtypes
from tunelab.errors import InputError


def test_aliases_long_and_short_names():
    assert dtypes.long_name("fp16") == dtypes.long_name("half") == dtypes.long_name("torch.float16") == "float16"
    assert dtypes.short_name("torch.bfloat16") == "bf16" and dtypes.short_name("c64") == "complex64"
    assert dtypes.long_name("int8") is None and dtypes.short_name("int8") is None
    assert set(dtypes.SHORT) == set(dtypes.ALIASES.values())


def test_canonical_names_the_value_and_the_accepted_ones():
    assert dtypes.canonical("bf16", ("float16", "bfloat16"), "the attention family") == "bfloat16"
    with pytest.raises(InputError, match=r"dtype 'fp32' is not supported by the attention family; use fp16, bf16"):
        dtypes.canonical("fp32", ("float16", "bfloat16"), "the attention family")


def test_families_share_the_table():
    from tunelab.tuning.families.attention import AttentionProblem
    from tunelab.tuning.families.gram import GramProblem
    from tunelab.tuning.families.similarity import SearchProblem

    assert SearchProblem(dtype="half").dtype == "fp16" and SearchProblem(dtype="float").torch_dtype == "float32"
    assert GramProblem(dtype="c64").dtype == "complex64" and GramProblem(dtype="c64").torch_dtype == "complex64"
    with pytest.raises(InputError, match="similarity problem; use fp16, bf16, fp32"):
        SearchProblem(dtype="complex64")
    with pytest.raises(InputError, match="attention family"):
        AttentionProblem(dtype="fp32")
