"""The training wing (chapter 08): the loop, and what keeps a run safe.

::

    train.py          the functions of training: seeding, one update, evaluation, divergence
    trainer.py        the Trainer: the loop for the three architectures
    fit.py            fit_task: seed, build the model, train (CLI, chapters 08-10, ablations)
    early_stopping.py stop when an evaluation metric has not improved for a while
    checkpoint.py     checkpoints that survive a crash and never run code when loaded
    averaging.py      the weights of the last evaluations kept, and their mean
    resuming.py       what may differ between a checkpoint and the run that resumes it
    run_state.py      the random generators' states and the history beside the weights
    run_lock.py       one run at a time per run directory
    run_folder.py     run.json: a run folder that describes itself
    provenance.py     code version, software, device, date: where a result came from
    distributed.py    torchrun with DistributedDataParallel; the device choice
    mps.py            on a Mac, the CPU fallback for what MPS lacks (set before torch loads)
    training_log.py   the history rows as TensorBoard curves

It imports the concepts (``config``, ``model``, ``losses``, ``optim``, ``metrics``), ``data``
and ``tasks``; nothing in it imports ``results``, ``ablation`` or ``book``.
"""
