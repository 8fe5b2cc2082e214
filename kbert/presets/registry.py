"""The registered presets: Google's BERT checkpoints by short name."""

# Each entry names the Hugging Face repository that holds Google's weights and
# the architecture, so that `list_presets()` can describe a preset without
# downloading it. Loading reads the architecture from the downloaded
# `config.json`; whether the preset is cased is checked against its
# `tokenizer_config.json` (`files.get_preset_dir`).
_MINIATURE = "google/bert_uncased_L-{layers}_H-{hidden}_A-{heads}"


def _entry(repo, layers, hidden, heads, lowercase, description, vocabulary_size=30522, num_segments=2,
           pooler=True, parameters=None):
    return {
        "parameters": parameters,
        "num_segments": num_segments,
        "pooler": pooler,
        "hf_repo": repo,
        "num_layers": layers,
        "hidden_dim": hidden,
        "num_heads": heads,
        "intermediate_dim": 4 * hidden,
        "vocabulary_size": vocabulary_size,
        "lowercase": lowercase,
        "description": description,
    }


def _modern(repo, layers, hidden, heads, parameters, description):
    return _entry(repo, layers, hidden, heads, None, description, vocabulary_size=None, num_segments=0,
                  pooler=False, parameters=parameters)


PRESETS = {
    "tiny": _entry(
        _MINIATURE.format(layers=2, hidden=128, heads=2), 2, 128, 2, True,
        "BERT-Tiny, uncased English (Turc et al. 2019).",
    ),
    "mini": _entry(
        _MINIATURE.format(layers=4, hidden=256, heads=4), 4, 256, 4, True,
        "BERT-Mini, uncased English (Turc et al. 2019).",
    ),
    "small": _entry(
        _MINIATURE.format(layers=4, hidden=512, heads=8), 4, 512, 8, True,
        "BERT-Small, uncased English (Turc et al. 2019).",
    ),
    "medium": _entry(
        _MINIATURE.format(layers=8, hidden=512, heads=8), 8, 512, 8, True,
        "BERT-Medium, uncased English (Turc et al. 2019).",
    ),
    "base": _entry(
        "google-bert/bert-base-uncased", 12, 768, 12, True,
        "BERT-Base, uncased English (Devlin et al. 2019).",
    ),
    "large": _entry(
        "google-bert/bert-large-uncased", 24, 1024, 16, True,
        "BERT-Large, uncased English (Devlin et al. 2019).",
    ),
    "base_cased": _entry(
        "google-bert/bert-base-cased", 12, 768, 12, False,
        "BERT-Base, cased English.", vocabulary_size=28996,
    ),
    "large_cased": _entry(
        "google-bert/bert-large-cased", 24, 1024, 16, False,
        "BERT-Large, cased English.", vocabulary_size=28996,
    ),
    "base_multilingual": _entry(
        "google-bert/bert-base-multilingual-cased", 12, 768, 12, False,
        "BERT-Base, cased, 104 languages.", vocabulary_size=119547,
    ),
    "base_multilingual_uncased": _entry(
        "google-bert/bert-base-multilingual-uncased", 12, 768, 12, True,
        "BERT-Base, uncased, 102 languages.", vocabulary_size=105879,
    ),
    # Other families (kbert.families): their tokenizers have no lowercase setting to check.
    "roberta_base": _entry(
        "FacebookAI/roberta-base", 12, 768, 12, None,
        "RoBERTa-Base, English (Liu et al. 2019).", vocabulary_size=50265, num_segments=1,
    ),
    "xlm_roberta_base": _entry(
        "FacebookAI/xlm-roberta-base", 12, 768, 12, None,
        "XLM-RoBERTa-Base, 100 languages (Conneau et al. 2020).", vocabulary_size=250002, num_segments=1,
    ),
    "multilingual_e5_small": _entry(
        "intfloat/multilingual-e5-small", 12, 384, 12, None,
        "multilingual-e5-small: an XLM-R text embedder (mean pooling), about 100 languages "
        "(Wang et al. 2024).", vocabulary_size=250037,
    ),
    "distilbert_base_uncased": _entry(
        "distilbert/distilbert-base-uncased", 6, 768, 12, True,
        "DistilBERT-Base, uncased English (Sanh et al. 2019).", num_segments=0, pooler=False,
    ),
    "electra_base_discriminator": _entry(
        "google/electra-base-discriminator", 12, 768, 12, True,
        "ELECTRA-Base discriminator, uncased English (Clark et al. 2020).", pooler=False,
    ),
    # The ModernBERT lineage (kbert.families.modernbert) and DeBERTa-v3. Their
    # layers are not BERT's (GeGLU and rotary positions; relative attention):
    # the parameter counts are transformers' own model's of each published config.
    **{name: _modern(*row) for name, row in {
        "modernbert_base": ("answerdotai/ModernBERT-base", 22, 768, 12, 149_014_272,
                            "ModernBERT-base, English and code, 8,192 tokens (Warner et al. 2024)."),
        "modernbert_large": ("answerdotai/ModernBERT-large", 28, 1024, 16, 394_781_696,
                             "ModernBERT-large, English and code, 8,192 tokens (Warner et al. 2024)."),
        "mmbert_small": ("jhu-clsp/mmBERT-small", 22, 384, 6, 140_493_696,
                         "mmBERT-small, 1,800+ languages, Gemma's tokenizer (Marone et al. 2025)."),
        "mmbert_base": ("jhu-clsp/mmBERT-base", 22, 768, 12, 306_939_648,
                        "mmBERT-base, 1,800+ languages, Gemma's tokenizer (Marone et al. 2025)."),
        "ettin_encoder_17m": ("jhu-clsp/ettin-encoder-17m", 7, 256, 4, 16_797_440,
                              "Ettin encoder 17M, English (Weller et al. 2025)."),
        "ettin_encoder_32m": ("jhu-clsp/ettin-encoder-32m", 10, 384, 6, 31_883_136,
                              "Ettin encoder 32M, English (Weller et al. 2025)."),
        "ettin_encoder_68m": ("jhu-clsp/ettin-encoder-68m", 19, 512, 8, 68_144_640,
                              "Ettin encoder 68M, English (Weller et al. 2025)."),
        "ettin_encoder_150m": ("jhu-clsp/ettin-encoder-150m", 22, 768, 12, 149_014_272,
                               "Ettin encoder 150M, English (Weller et al. 2025)."),
        "ettin_encoder_400m": ("jhu-clsp/ettin-encoder-400m", 28, 1024, 16, 394_781_696,
                               "Ettin encoder 400M, English (Weller et al. 2025)."),
        "ettin_encoder_1b": ("jhu-clsp/ettin-encoder-1b", 28, 1792, 28, 1_028_050_688,
                             "Ettin encoder 1B, English (Weller et al. 2025)."),
        "gte_modernbert_base": ("Alibaba-NLP/gte-modernbert-base", 22, 768, 12, 149_014_272,
                                "gte-modernbert-base: a ModernBERT text embedder (CLS pooling)."),
        "modernbert_embed_base": ("nomic-ai/modernbert-embed-base", 22, 768, 12, 149_014_272,
                                  "modernbert-embed-base: a ModernBERT text embedder (mean pooling, "
                                  "search_query: / search_document: prompts)."),
        "gte_reranker_modernbert_base": ("Alibaba-NLP/gte-reranker-modernbert-base", 22, 768, 12, 149_014_272,
                                         "gte-reranker-modernbert-base: a ModernBERT cross-encoder (rank)."),
        # DeBERTa-v3 (kbert.families.deberta_v2): transformers' DebertaV2Model's counts.
        "deberta_v3_xsmall": ("microsoft/deberta-v3-xsmall", 12, 384, 6, 70_682_112,
                              "DeBERTa-v3-xsmall, English (He et al. 2023)."),
        "deberta_v3_small": ("microsoft/deberta-v3-small", 6, 768, 12, 141_304_320,
                             "DeBERTa-v3-small, English (He et al. 2023)."),
        "deberta_v3_base": ("microsoft/deberta-v3-base", 12, 768, 12, 183_831_552,
                            "DeBERTa-v3-base, English (He et al. 2023)."),
        "deberta_v3_large": ("microsoft/deberta-v3-large", 24, 1024, 16, 434_012_160,
                             "DeBERTa-v3-large, English (He et al. 2023)."),
        "mdeberta_v3_base": ("microsoft/mdeberta-v3-base", 12, 768, 12, 278_218_752,
                             "mDeBERTa-v3-base, about 100 languages (He et al. 2023)."),
        "deberta_v3_base_nli": ("MoritzLaurer/DeBERTa-v3-base-mnli-fever-anli", 12, 768, 12, 183_831_552,
                                "DeBERTa-v3-base fine-tuned on MNLI, FEVER and ANLI: an NLI cross-encoder "
                                "(entailment, neutral, contradiction)."),
    }.items()},
}


def parameter_count(entry, max_sequence_length=512, num_segments=2, pooler=True):
    """Number of backbone parameters of a registry entry (with the pooler
    where `pooler`)."""
    h, i = entry["hidden_dim"], entry["intermediate_dim"]
    embeddings = (entry["vocabulary_size"] + max_sequence_length + num_segments) * h + 2 * h
    layer = 4 * (h * h + h) + 2 * h + (h * i + i) + (i * h + h) + 2 * h
    return embeddings + entry["num_layers"] * layer + (h * h + h) * pooler


def list_presets():
    """The registered presets as a list of dicts (name, repository, sizes).

    Example:
    >>> [p["name"] for p in kbert.presets.list_presets()][:3]
    ['tiny', 'mini', 'small']
    """
    return [
        {
            "name": name,
            "hf_repo": entry["hf_repo"],
            "num_layers": entry["num_layers"],
            "hidden_dim": entry["hidden_dim"],
            "num_heads": entry["num_heads"],
            "parameters": entry["parameters"] or parameter_count(entry, num_segments=entry["num_segments"],
                                                                 pooler=entry["pooler"]),
            "lowercase": entry["lowercase"],
            "description": entry["description"],
        }
        for name, entry in PRESETS.items()
    ]


def format_presets():
    """The registered presets as a printable table."""
    rows = [("name", "layers", "hidden", "heads", "params", "repository")]
    for p in list_presets():
        rows.append((
            p["name"], str(p["num_layers"]), str(p["hidden_dim"]), str(p["num_heads"]),
            f"{p['parameters'] / 1e6:.1f}M", p["hf_repo"],
        ))
    widths = [max(len(r[c]) for r in rows) for c in range(len(rows[0]))]
    return "\n".join("  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip() for r in rows)
