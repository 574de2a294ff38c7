"""Parity with Hugging Face Marian: the same logits and greedy translations from mapped weights.

Our sinusoidal Transformer (tiny dims, trained TRAIN_STEPS Adam steps so that it ends sentences
with EOS) with a real SentencePiece model trained on the corpus, its weights mapped by
interop/marian.py into ``transformers.MarianMTModel``, on a real corpus sample: the toy corpus
(data/toy.py) and Multi30k (../shared/data/multi30k). Float32; teacher-forced logits agree within
LOGITS_ATOL (measured: 2.2e-6 and 2.4e-6 on logits up to 8) and greedy search gives the same
tokens sentence for sentence.
"""

import pytest
import torch

from common.errors import UserError
from data.batching import collate
from data.corpus import read_lines
from data.tokenizer import BOS_ID, EOS_ID, PAD_ID, Tokenizer, train_tokenizer
from data.toy import toy_pairs
from interop.marian import channel_permutation, marian_generate, set_layer_norm_eps, to_marian
from model.search import greedy_search
from tests.conftest import POSITION_CONFIGS, shared_data, tiny_model
from training.loss import forward_backward

LOGITS_ATOL = 2e-5
SAMPLE = 24
MAX_LEN_B = 10
TRAIN_STEPS = 150
SINUSOIDAL = next(p for p in POSITION_CONFIGS if p.stem == "sinusoidal")


def corpus_sample(name: str, tmp_path_factory):
    """A tokenizer trained on the corpus's training text, its training pairs, SAMPLE test pairs."""
    if name == "toy":
        pairs = toy_pairs(train_size=2000, validation_size=10, test_size=SAMPLE, test_long_size=10)
        train, test, vocab = pairs["train"], pairs["test"], 400
    else:
        folder = shared_data("multi30k")
        en, de = read_lines(folder / "train.en", "en"), read_lines(folder / "train.de", "de")
        train, vocab = list(zip(en[:3000], de[:3000], strict=True)), 1000
        test_en = read_lines(folder / "test_2016_flickr.en", "en")
        test_de = read_lines(folder / "test_2016_flickr.de", "de")
        test = list(zip(test_en, test_de, strict=True))[:SAMPLE]
    texts = [text for pair in train for text in pair]
    out = tmp_path_factory.mktemp(f"spm-{name}")
    tokenizer = train_tokenizer(texts, vocab, out, sample_size=len(texts), num_threads=1)
    return tokenizer, train, test


def train_briefly(
    model, tokenizer: Tokenizer, train: list[tuple[str, str]], steps: int = TRAIN_STEPS
):
    """A few Adam steps of the real loss, so that the model ends sentences with EOS."""
    src = [ids + [EOS_ID] for ids in tokenizer.encode([en for en, _ in train])]
    tgt = [ids + [EOS_ID] for ids in tokenizer.encode([de for _, de in train])]
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3, betas=(0.9, 0.98))
    generator = torch.Generator().manual_seed(0)
    model.train()
    for _ in range(steps):
        rows = torch.randint(len(src), (32,), generator=generator).tolist()
        batch = collate(
            [{"src_ids": src[i], "tgt_ids": tgt[i]} for i in rows], pad_id=PAD_ID, bos_id=BOS_ID
        )
        optimizer.zero_grad()
        forward_backward(model, batch, smoothing=0.1, scale=1.0, precision="fp32")
        optimizer.step()
    return model.eval()


@pytest.fixture(scope="module", params=["toy", "multi30k"])
def pair(request, tmp_path_factory):
    """(our model, its Marian, the corpus batch, the sources' ids + EOS) for one corpus."""
    tokenizer, train, test = corpus_sample(request.param, tmp_path_factory)
    model = tiny_model(SINUSOIDAL, vocab_size=tokenizer.vocab_size, max_positions=256)
    model = train_briefly(model, tokenizer, train)
    src_ids = [ids + [EOS_ID] for ids in tokenizer.encode([en for en, _ in test])]
    tgt_ids = [ids + [EOS_ID] for ids in tokenizer.encode([de for _, de in test])]
    examples = [{"src_ids": s, "tgt_ids": t} for s, t in zip(src_ids, tgt_ids, strict=True)]
    batch = collate(examples, pad_id=PAD_ID, bos_id=BOS_ID)
    assert (batch["src"] == PAD_ID).any(), "the sample should hold padded sources"
    return model, to_marian(model), batch, src_ids


def marian_logits(marian, batch, attention_mask=None) -> torch.Tensor:
    src = batch["src"]
    mask = src.ne(PAD_ID) if attention_mask is None else attention_mask
    with torch.no_grad():
        return marian(input_ids=src, attention_mask=mask, decoder_input_ids=batch["tgt_in"]).logits


def real_positions(batch) -> torch.Tensor:
    return batch["tgt_out"] != PAD_ID  # [B, T]


def test_teacher_forced_logits_are_equal(pair):
    model, marian, batch, _ = pair
    with torch.no_grad():
        ours = model(batch["src"], batch["tgt_in"])  # [B, T, V]
    theirs = marian_logits(marian, batch)
    keep = real_positions(batch)
    diff = (ours - theirs)[keep].abs().max().item()
    print(f"max |logit difference| {diff:.2e} (logits up to {ours.abs().max():.2f})")
    assert diff < LOGITS_ATOL


def test_greedy_translations_are_equal(pair):
    model, marian, batch, src_ids = pair
    ours = greedy_search(model, batch["src"], BOS_ID, EOS_ID, MAX_LEN_B)
    theirs = marian_generate(marian, src_ids, beam=1, max_len_b=MAX_LEN_B)
    assert len(ours) == len(src_ids)
    assert ours == theirs
    assert any(
        len(hyp) < len(src) - 1 + MAX_LEN_B - 1 for hyp, src in zip(ours, src_ids, strict=True)
    )


def broken(marian, what: str, batch):
    """Marian's logits with one thing broken, to show the comparison would catch it."""
    if what == "source mask":
        return marian_logits(marian, batch, attention_mask=torch.ones_like(batch["src"]))
    if what == "embedding scale":
        old = marian.model.encoder.embed_scale, marian.model.decoder.embed_scale
        marian.model.encoder.embed_scale = marian.model.decoder.embed_scale = 1.0
        try:
            return marian_logits(marian, batch)
        finally:
            marian.model.encoder.embed_scale, marian.model.decoder.embed_scale = old
    if what == "position offset":
        table = marian.model.decoder.embed_positions.weight
        saved = table.detach().clone()
        with torch.no_grad():
            table[:-1] = saved[1:]  # decoder positions start at 1
        try:
            return marian_logits(marian, batch)
        finally:
            with torch.no_grad():
                table.copy_(saved)
    if what == "layer norm eps 1e-2":
        set_layer_norm_eps(marian, 1e-2)
        try:
            return marian_logits(marian, batch)
        finally:
            set_layer_norm_eps(marian, 1e-6)
    raise ValueError(what)


@pytest.mark.parametrize(
    "what", ["source mask", "embedding scale", "position offset", "layer norm eps 1e-2"]
)
def test_comparison_catches_a_broken_side(pair, what):
    model, marian, batch, _ = pair
    with torch.no_grad():
        ours = model(batch["src"], batch["tgt_in"])
    diff = (ours - broken(marian, what, batch))[real_positions(batch)].abs().max().item()
    assert diff > 100 * LOGITS_ATOL
    assert (ours - marian_logits(marian, batch))[real_positions(batch)].abs().max() < LOGITS_ATOL


def test_channel_permutation_maps_interleaved_sinusoids_to_marians_halves():
    from transformers.models.marian.modeling_marian import MarianSinusoidalPositionalEmbedding

    from model.position import sinusoidal_table

    d = 16
    theirs = MarianSinusoidalPositionalEmbedding(50, d)
    ours = sinusoidal_table(50, d)
    assert torch.allclose(ours[:, channel_permutation(d)], theirs.create_weight(), atol=1e-6)
    assert not torch.allclose(ours, theirs.create_weight(), atol=1e-2)


def test_other_position_variants_are_refused():
    for path in POSITION_CONFIGS:
        if path.stem == "sinusoidal":
            continue
        with pytest.raises(UserError, match="only fixed sinusoidal"):
            to_marian(tiny_model(path))
