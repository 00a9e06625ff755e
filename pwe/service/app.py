"""The Celery app of the service and its tasks (the one module that imports celery).

Tasks: ``pwe.submit`` (make a run, start its engine), ``pwe.tick`` (beat sends it every
second: adopt runs whose engine died, fire triggers), ``pwe.runstate.notify`` (a batch system's
edge event for a run, over the broker, handed to :mod:`pwe.runstate.notify`).

Settings, and the pitfalls they answer:

- **JSON only**: ``task_serializer``, ``result_serializer`` and ``accept_content`` are JSON;
  a pickled message is refused. No result backend (``task_ignore_result``): a client
  learns its run id from itself, since it chose it.
- **Redelivery after** ``visibility_timeout`` (celery #7918: a task still unacknowledged
  then runs a second time): no task runs a workflow; each takes milliseconds to a few
  seconds, far below the visibility timeout set here (600 s), so a task is not redelivered
  while it runs. A run is driven by its own engine process, never by a task.
- ``acks_late`` **without idempotence**: tasks are acknowledged after they ran (a worker
  killed mid-task gets it redelivered) and every task is idempotent: a submission carries
  the run id its client chose (a second delivery finds the run), a tick derives trigger
  runs' ids from what fired them, ``engine.lock`` keeps a run to one engine, and an edge
  event carries its own id (the engine journals it once).
- **A worker that stops consuming after a Redis reconnect** (celery #8030):
  ``worker_cancel_long_running_tasks_on_connection_loss`` (with acks_late, tasks cut off
  by the loss are delivered again), connection retries forever, redis-py's health check
  and TCP keepalive on the broker connection; and above all a liveness check that does
  not trust the worker's word: the tick goes beat -> broker -> worker -> ``tick`` file, and
  the service process (:mod:`.daemon`) restarts worker and beat when that file stops
  moving. ``pwe service status`` shows its age.
- beat's default scheduler keeps its state in a ``shelve`` (pickle): the service uses
  ``celery.beat:Scheduler`` (in memory); the only entry is the tick, which keeps no state.
"""

from __future__ import annotations

import os
from typing import Any

from celery import Celery

from ..base.settings import SERVICE_WORKER
from ..runstate.service_store import Store

TICK_EVERY = 1.0
#: Longer than any task can take (tasks take milliseconds to seconds: a run is not a task).
VISIBILITY_TIMEOUT = 600


def broker_options(url: str, store: Store | None) -> dict[str, Any]:
    if url.startswith("filesystem:"):
        assert store is not None
        q = str(store.broker_dir / "queue")
        return {"data_folder_in": q, "data_folder_out": q, "store_processed": True,
                "processed_folder": str(store.broker_dir / "processed"),
                "control_folder": str(store.broker_dir / "control"), "polling_interval": 0.2}
    return {"visibility_timeout": VISIBILITY_TIMEOUT, "health_check_interval": 10, "socket_keepalive": True,
            "socket_timeout": 30, "socket_connect_timeout": 10}


def make_app(url: str, queue: str, store: Store | None = None) -> Celery:
    app = Celery("pwe", broker=url, set_as_current=False)
    app.conf.update(
        broker_transport_options=broker_options(url, store),
        broker_connection_retry_on_startup=True,
        broker_connection_max_retries=None,
        broker_heartbeat=10,  # (amqp only; redis: the health check above)
        worker_cancel_long_running_tasks_on_connection_loss=True,
        task_serializer="json", result_serializer="json", accept_content=["json"], event_serializer="json",
        task_ignore_result=True, result_backend=None,
        task_acks_late=True, task_reject_on_worker_lost=True, worker_prefetch_multiplier=1,
        task_default_queue=queue, task_create_missing_queues=True,
        worker_enable_remote_control=False, worker_send_task_events=False, worker_hijack_root_logger=False,
        beat_schedule={"tick": {"task": "pwe.tick", "schedule": TICK_EVERY,
                                # a tick nobody took within a few seconds is worthless: the next one is due
                                "options": {"expires": 5 * TICK_EVERY, "queue": queue}}},
        timezone="UTC", enable_utc=True,
    )
    return app


def broker_url(store: Store) -> str:
    """The broker the service uses: config.json's, else the embedded filesystem one."""
    return store.config().get("broker") or "filesystem://"


def _service_app() -> Celery:
    """The app the worker and beat processes load (``-A pwe.service.app``): the service
    directory comes from ``PWE_SERVICE_DIR`` (set by the service), the broker from its config.json."""
    store = Store()
    app = make_app(broker_url(store), store.queue(), store)

    @app.task(name="pwe.submit")
    def submit(req: dict[str, Any]) -> str:
        from .submit import submit_run

        return submit_run(store, req)["run_id"]

    @app.task(name="pwe.tick")
    def tick() -> None:
        from .supervisor import tick as run_tick

        run_tick(store)
        _prune(store)

    @app.task(name="pwe.runstate.notify")
    def notify(run_id: str, pilot: str, event: str, job: str, status: int | None = None) -> None:
        from pathlib import Path

        from ..base.ids import is_run_id

        rec = store.submission(run_id) if is_run_id(run_id) else None
        if rec is not None:
            from ..runstate.notify import send

            send(Path(rec["run_dir"]), pilot, event, job, status)

    return app


def _prune(store: Store) -> None:
    """Messages the embedded broker has delivered are kept a minute (owner-only), then removed."""
    import time

    d = store.broker_dir / "processed"
    try:
        for name in os.listdir(d):
            p = d / name
            if time.time() - p.stat().st_mtime > 60:
                p.unlink(missing_ok=True)
    except OSError:
        pass


def send(url: str, queue: str, store: Store | None, task: str, **kwargs: Any) -> None:
    """Publish one task (a client: ``pwe submit --service``); raises what the broker raised."""
    app = make_app(url, queue, store)
    with app.connection_for_write() as conn:
        conn.ensure_connection(max_retries=1)
        app.send_task(task, kwargs=kwargs, queue=queue, connection=conn)


def queue_depth(url: str, queue: str, store: Store | None) -> int | None:
    """Messages waiting in the queue; None when the broker does not answer."""
    app = make_app(url, queue, store)
    try:
        with app.connection_for_read() as conn:
            conn.ensure_connection(max_retries=1)
            try:
                return int(conn.default_channel.queue_declare(queue=queue, passive=True).message_count)
            except Exception:
                return 0  # the broker answers but has no such queue yet (Redis: an empty list is no key)
    except Exception:
        return None


def __getattr__(name: str) -> Any:
    """``app`` (what ``celery -A pwe.service.app`` looks for): the service's app, made on
    first use in a process the service started for it (``PWE_SERVICE_WORKER``), never at import."""
    if name == "app" and SERVICE_WORKER.get():
        made = globals()["app"] = _service_app()
        return made
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
