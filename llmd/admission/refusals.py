"""What a client is told when admission refuses its request: the scheduler's rejections and a
full body budget, as the ApiErrors the proxy answers (429 or 503, with Retry-After)."""

from __future__ import annotations

import time

import structlog

from llmd.admission.bodies import BodyBudget
from llmd.admission.entries import Reason, Rejection
from llmd.admission.scheduler import Scheduler
from llmd.errors import ApiError, QueueFull, QueueTimeout, RateLimited

log = structlog.get_logger("llmd.admission")


def rejection_error(rejection: Rejection, scheduler: Scheduler) -> ApiError:
    """The client-facing error for a rejection by `scheduler` (counted and logged as
    `request_rejected`, key never included): 429 rate_limited or queue_full, 503
    queue_timeout (its deadline or its class's queue timeout passed)."""
    entry, reason, retry = rejection.entry, rejection.reason, rejection.retry_after_s
    tenant, cls = entry.tenant, entry.cls.label
    log.info("request_rejected", tenant=tenant.name, cls=cls, reason=reason.value)
    if reason is Reason.RATE_LIMITED:
        return RateLimited(
            f"tenant {tenant.name} already has {tenant.max_queued} requests waiting, "
            "its limit; retry later",
            retry_after_s=retry,
        )
    if reason is Reason.QUEUE_FULL:
        size = scheduler.classes[entry.cls].policy.queue_size
        return QueueFull(
            f"the {cls} queue is full ({size} requests); retry later", retry_after_s=retry
        )
    if reason is Reason.DEADLINE:
        return QueueTimeout(
            "the request's x-llmd-deadline-ms passed while it waited in the queue",
            retry_after_s=retry,
        )
    timeout = scheduler.classes[entry.cls].policy.queue_timeout_s
    return QueueTimeout(
        f"the request waited {timeout:g} s in the {cls} queue, its timeout; retry later",
        retry_after_s=retry,
    )


def bodies_full(bodies: BodyBudget, scheduler: Scheduler) -> QueueFull:
    """429 queue_full for a request whose body would pass the body budget (`bodies`), its
    Retry-After the wait the queue's release rate predicts for the whole queue (1 s to 10 min)."""
    retry = scheduler.rates.wait_s((None, None), scheduler.queued(), time.monotonic())
    return QueueFull(
        f"llmd holds {bodies.held:,} bytes of requests waiting for the engine, "
        f"near its limit of {bodies.limit:,}; retry later",
        retry_after_s=retry,
    )
