"""pwe as a long-lived service (``pwe service``, ``pwe trigger``, ``pwe submit --service``).

Where things are (``service/`` in pwe's state directory, :mod:`pwe.base.places`: ``$PWE_HOME/state``,
``$XDG_STATE_HOME/pwe``, default ``~/.local/state/pwe``; owner-only)::

    service/
      config.json        the broker (a Redis URL keeps its password: mode 600), the queue, the run root
      service.json       the running service: its pid, its worker's and beat's, when it started
      service.lock       held (flock) by the running service: one service per directory
      service.log        the service's own lines; worker.log, beat.log: Celery's
      broker/            the embedded broker (kombu's filesystem transport): one file a message
      tick               when the worker last ran a tick (the liveness check of pwe service status)
      submissions/       one record per run the service drives (<run-id>.json), and the workflow
                         text of a submission whose file the service cannot read (<run-id>.yaml)
      triggers.json      the triggers and what each has done (last slot, last run, pending fires)
      history.jsonl      what triggers did: fired, skipped, queued, missed (one JSON line each)
      runs/<run-id>/     the run directories (unless --run-root says elsewhere)

The parts: :mod:`.cron` (schedules in UTC, DST, catch-up), :mod:`.store` (the files above),
:mod:`.submit` (making a run, idempotently, by the id its client chose), :mod:`.supervisor`
(the tick: adopting runs whose engine died, firing triggers), :mod:`.app` (the Celery app
and its tasks; the only module that imports celery), :mod:`.daemon` (start, stop, status and
the process that keeps the worker and beat alive).

A run is never executed inside a Celery task: tasks are short and idempotent, and each run
is driven by its own detached engine (``pwe _engine``), whose journal is its state.
"""
