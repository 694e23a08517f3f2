"""The tasks wing (chapter 08): what is trained on, and at which size.

::

    build.py          build_task, task_from_info: every task by one call; the data-set tasks
    task_options.py   Task, TaskInfo, TASKS, check_options: what a task is and accepts
    copy_task.py      the synthetic copy task that proves the pipeline learns
    profiles.py       run sizes (smoke / cpu / reference / gpu) per task
    settings.py       section.key=value routing for --config/--set and papermill overrides
    train_settings.py what the train command's --set and --config may address, resolved once
    baselines.py      unigram and bigram count baselines for language models

``build_task`` and ``task_from_info`` are the wing's entry points and are importable from it
directly (``from annotated_transformer.tasks import build_task``).
"""

from .build import build_task, task_from_info

__all__ = ["build_task", "task_from_info"]
