"""The one-page model (annotated_transformer/minimal.py) is the package's configurable model at
the paper's settings: the same parameters, and with the same weights the same logits."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import annotated_transformer as at
from annotated_transformer import minimal

SIZES = {"d_model": 32, "heads": 4, "layers": 2, "d_ff": 64}
CONFIG_SIZES = {"d_model": 32, "n_heads": 4, "n_layers": 2, "d_ff": 64}


def pair(vocab_size: int = 50):
    torch.manual_seed(0)
    package = at.build_model(minimal.paper_base_config(vocab_size, **CONFIG_SIZES)).eval()
    one_page = minimal.Transformer(vocab_size, **SIZES).eval()
    one_page.load_state_dict(package.state_dict())  # strict: every name and shape the same
    return package, one_page


def test_the_file_fits_on_a_page_and_needs_only_torch():
    source = Path(minimal.__file__).read_text(encoding="utf-8")
    assert len(source.splitlines()) <= 250
    imports = [line for line in source.splitlines() if line.startswith(("import ", "from "))]
    assert all("annotated_transformer" not in line and " ." not in line for line in imports)


def test_same_parameters_as_the_package_model():
    package, one_page = pair()
    assert at.count_parameters(one_page) == at.count_parameters(package)
    assert at.count_parameters(package) == at.parameter_count(package.config)
    assert one_page.output_projection.weight is one_page.src_embedding.embedding.weight


@pytest.mark.parametrize("padded", [False, True])
def test_same_weights_give_the_same_logits(padded):
    package, one_page = pair()
    src, tgt = torch.randint(3, 50, (3, 9)), torch.randint(3, 50, (3, 7))
    if padded:
        src[1, -4:] = 0
        tgt[2, -3:] = 0
    with torch.no_grad():
        expected, logits = package(src, tgt), one_page(src, tgt)
    torch.testing.assert_close(logits, expected)
    changed = tgt.clone()
    changed[:, 4] = (changed[:, 4] + 1) % 50
    with torch.no_grad():  # causal: positions before 4 cannot see the change
        torch.testing.assert_close(one_page(src, changed)[:, :4], logits[:, :4])


def test_the_default_sizes_are_the_papers_base_model():
    config = minimal.paper_base_config(37000)
    assert (config.d_model, config.n_heads, config.n_layers, config.d_ff) == (512, 8, 6, 2048)
    assert config.dropout == 0.1 and config.norm_position == "post"
    # Table 3 lists 65M parameters for the base model with a 37k shared vocabulary.
    assert 60e6 < at.parameter_count(config) < 66e6
