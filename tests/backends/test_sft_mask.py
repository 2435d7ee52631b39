"""The SFT loss mask (issue 9 item 3), checked by decoding what each framework actually trains on: only the
assistant replies and their end-of-turn token; never the instruction, the observations, the canned
acknowledgement (loss false), the role header or the empty think block of thinking-off inference."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("transformers")

from twinrun.core.sft.data import (
    REACT_ACK,
    ChatTurnRenderer,
    build_sft_dataset,
    decode_trained,
    react_turns,
    render_reply,
    sciworld_instruction,
    tokenize_record,
)
from twinrun.core.sft.trajectories import TrajectoryRecord, load_trajectories

GOLD = Path(__file__).parent / "data" / "sciworld-gold-mini.jsonl"
EOT = "<|im_end|>"


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    from transformers import AutoTokenizer

    from twinrun.models import build_tiny_qwen3

    return AutoTokenizer.from_pretrained(build_tiny_qwen3(tmp_path_factory.mktemp("models")))


def _hand_record() -> TrajectoryRecord:
    replies = [render_reply("The door is closed.", "open door to hallway"),
               render_reply("Now go.", "go to hallway")]
    turns = react_turns(sciworld_instruction(), "Your task is to boil water.\nThis room is the kitchen.", replies,
                        ["The door is now open.", "You move to the hallway."])
    return TrajectoryRecord(id="hand", env="sciworld", task="boil", turns=turns)


def _expected_spans(rec: TrajectoryRecord) -> list[str]:
    return [t.content + EOT for t in rec.turns if t.trained]


def test_trained_tokens_decode_to_the_replies_only(tok):
    rec = _hand_record()
    renderer = ChatTurnRenderer(tok)
    ex = tokenize_record(rec, renderer, max_length=100_000)
    spans = decode_trained(tok, ex)
    assert spans == _expected_spans(rec)
    joined = "".join(spans)
    for absent in (REACT_ACK, "open/close OBJ", "Your task is to boil water", "The door is now open.", "<think>",
                   "<|im_start|>", "assistant\n"):
        assert absent not in joined
    # nothing is lost or reordered: the untrained + trained pieces decode to the rendered conversation
    assert tok.decode(ex.input_ids) == renderer.text(rec.turns)
    # each trained reply sits right after the thinking-off generation prompt, as at inference
    assert renderer.assistant_header == "<|im_start|>assistant\n<think>\n\n</think>\n\n"
    assert renderer.text(rec.turns).count(renderer.assistant_header + "Thought:") == 2


def test_ack_with_loss_true_would_be_trained(tok):
    """The flag, not the role, decides: an acknowledgement marked loss true is trained."""
    rec = _hand_record()
    rec.turns[1] = rec.turns[1].model_copy(update={"loss": True})
    spans = decode_trained(tok, tokenize_record(rec, ChatTurnRenderer(tok), 100_000))
    assert spans[0] == REACT_ACK + EOT and len(spans) == 3


def test_gold_path_fixture_masks(tok):
    records = load_trajectories(GOLD)
    assert all(r.teacher == "gold-path" for r in records)
    ds = build_sft_dataset(records, tok, max_length=100_000, seed=0)
    by_id = {r.id: r for r in records}
    for ex in ds.examples:
        assert decode_trained(tok, ex) == _expected_spans(by_id[ex.id])
    # truncation keeps the start: the trained text is a prefix of the replies
    cut = build_sft_dataset(records, tok, max_length=1400, seed=0)
    assert cut.truncated >= 1
    for ex in cut.examples:
        got = "".join(decode_trained(tok, ex))
        assert "".join(_expected_spans(by_id[ex.id])).startswith(got) and len(ex.input_ids) <= 1400


@pytest.mark.trl
def test_trl_trains_on_exactly_these_tokens(tok, tmp_path):
    """TRL's own dataset preparation (SFTTrainer) turns the shared masks into labels: decode labels != -100."""
    pytest.importorskip("trl")
    import torch
    from datasets import Dataset
    from transformers import Qwen3Config, Qwen3ForCausalLM
    from trl import SFTConfig, SFTTrainer

    rec = _hand_record()
    ex = tokenize_record(rec, ChatTurnRenderer(tok), 100_000)
    ds = Dataset.from_dict({"id": [ex.id], "input_ids": [ex.input_ids], "assistant_masks": [ex.loss_mask]})
    model = Qwen3ForCausalLM(Qwen3Config(vocab_size=len(tok), hidden_size=16, intermediate_size=32,
                                         num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
                                         head_dim=8))
    from twinrun.core.spec import load_spec
    from twinrun.backends.sft_plan import sft_schedule, trl_sft_config

    spec = load_spec(Path(__file__).parents[2] / "experiments" / "sft-sciworld-cpu.yaml",
                     ["sft.batch_size=1", "sft.micro_batch_size=1"])
    cfg = SFTConfig(**trl_sft_config(spec, sft_schedule(spec, 1), str(tmp_path)))
    trainer = SFTTrainer(model=model, args=cfg, train_dataset=ds, processing_class=tok)
    labels = trainer.train_dataset[0]["labels"]
    runs, cur = [], []
    for lab in labels:
        if lab != -100:
            cur.append(lab)
        elif cur:
            runs.append(cur)
            cur = []
    if cur:
        runs.append(cur)
    assert [tok.decode(r) for r in runs] == _expected_spans(rec)
    # and the collator keeps them (right padding, -100 on pads)
    batch = trainer.data_collator([trainer.train_dataset[0]])
    assert torch.equal(batch["labels"][0], torch.tensor(labels))


@pytest.mark.verl
def test_verl_trains_on_exactly_these_tokens(tok, tmp_path):
    """verl's dataset (twinrun's custom_cls) yields the shared mask, and verl's own sft_loss sums the log-probs
    that predict exactly the masked tokens (it rolls the mask by one to align with next-token log-probs)."""
    pytest.importorskip("verl")
    import torch
    from omegaconf import OmegaConf
    from verl.workers.utils.losses import sft_loss

    from twinrun.backends.verl.sft import PretokenizedSFTDataset
    from twinrun.core.records import JsonlWriter

    rec = _hand_record()
    ex = tokenize_record(rec, ChatTurnRenderer(tok), 100_000)
    data = tmp_path / "train.jsonl"
    with JsonlWriter(data) as w:
        w.write({"id": ex.id, "input_ids": ex.input_ids, "loss_mask": ex.loss_mask})
    log = tmp_path / "fetch.jsonl"
    ds = PretokenizedSFTDataset(str(data), tok, OmegaConf.create({"twinrun_fetch_log": str(log)}))
    item = ds[0]
    assert item["input_ids"].tolist() == ex.input_ids and item["position_ids"].tolist() == list(range(ex.tokens))
    masked = [t for t, m in zip(item["input_ids"].tolist(), item["loss_mask"].tolist()) if m]
    assert tok.decode(masked) == "".join(_expected_spans(rec))
    assert log.read_text().count('"id": "hand"') == 1
    # sft_loss: log_prob[t] scores token t+1; give each position the value -(id of the token it predicts)
    ids = item["input_ids"]
    next_ids = torch.roll(ids, -1).to(torch.float32)
    lp = torch.nested.as_nested_tensor([-next_ids], layout=torch.jagged)
    lm = torch.nested.as_nested_tensor([item["loss_mask"]], layout=torch.jagged)
    loss, _ = sft_loss(None, {"log_probs": lp}, {"loss_mask": lm, "dp_size": 1, "batch_num_tokens": 1})
    assert float(loss) == pytest.approx(float(sum(masked)))
