"""The results wing (chapter 08): what a run leaves for readers.

::

    experiments.py    the results store: records with provenance, keyed by their config
    pretrained.py     trained models as safetensors + JSON, loaded with no pickle
    evaluation.py     translate held-out splits (one budget), score_translations (BLEU/chrF)
    masked_lm.py      a masked language model read at the masked words and at every word
    decoding.py       chapter 12's study: BLEU against beam and alpha, search errors
    probes.py         the reference runs' lever probes, side by side

It may import the training and tasks wings; nothing below it imports it.
"""
