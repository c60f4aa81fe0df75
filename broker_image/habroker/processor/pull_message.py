"""PullMessageProcessor: PULL_MESSAGE with long polling, tag filtering and piggy-backed commits.

The answer's body is commit-log bytes, verbatim, written from the store's slices.  Statuses map
as a 4.9 broker maps them; a pull that finds nothing and may be suspended waits (the
PullRequestHoldService's job) until the queue grows or ``suspendTimeoutMillis`` passes, then is
served once more.  ``suggestWhichBrokerId`` carries the read policy (habroker.read_policy).
"""

from __future__ import annotations

import logging

from habroker.broker import BrokerController, PullOutcome
from habroker.config import MAX_TRANSFER_BYTES
from habroker.processor.client_manager import ConsumerManager, SubscriptionData
from habroker.processor.errors import REFUSALS, refusal
from habroker.processor.headers import Header
from habroker.remoting import RemotingCommand, RequestCode, ResponseCode
from habroker.remoting.channel import Channel
from habroker.remoting.server import RemotingServer, RequestRefused
from habroker.store import GetMessageStatus

log = logging.getLogger(__name__)

# PullSysFlag bits
FLAG_COMMIT_OFFSET = 0x1
FLAG_SUSPEND = 0x2
FLAG_SUBSCRIPTION = 0x4
FLAG_CLASS_FILTER = 0x8
MAX_SUSPEND_SECONDS = 60.0
SHORT_POLLING_SECONDS = 1.0  # shortPollingTimeMills, when longPollingEnable=false


class PullMessageProcessor:
    def __init__(self, broker: BrokerController, consumers: ConsumerManager) -> None:
        self.broker = broker
        self.consumers = consumers
        self.suspended = 0  # pulls waiting now (for status and tests)

    def register(self, server: RemotingServer) -> None:
        server.register(RequestCode.PULL_MESSAGE, self.process)
        server.register(RequestCode.LITE_PULL_MESSAGE, self.process)

    async def process(self, request: RemotingCommand, channel: Channel) -> RemotingCommand:
        try:
            h = Header(request)
            group = h.text("consumerGroup")
            topic = h.text("topic")
            queue_id = h.int32("queueId")
            offset = h.int64("queueOffset")
            max_msgs = h.int32("maxMsgNums")
            sys_flag = h.int32("sysFlag")
            commit_offset = h.int64("commitOffset", 0)
            suspend_ms = h.int64("suspendTimeoutMillis", 0)
            self.broker.check_pull(group)
            sub = self._subscription(h, group, topic, sys_flag)
            tags_codes = None if sub.matches_all else frozenset(sub.codes)
            if sys_flag & FLAG_COMMIT_OFFSET and not self.broker.is_slave and commit_offset >= 0:
                self.broker.commit_offset(group, topic, queue_id, commit_offset)
            outcome = self._pull(topic, queue_id, offset, max_msgs, group, tags_codes)
            if (
                _code(outcome, offset) == ResponseCode.PULL_NOT_FOUND
                and sys_flag & FLAG_SUSPEND
                and suspend_ms > 0
            ):
                wait = (
                    min(suspend_ms / 1000, MAX_SUSPEND_SECONDS)
                    if self.broker.config.longPollingEnable
                    else SHORT_POLLING_SECONDS
                )
                self.suspended += 1
                try:
                    await self.broker.store.wait_for_messages(topic, queue_id, offset, wait)
                finally:
                    self.suspended -= 1
                if not channel.is_open:
                    return request.response(ResponseCode.PULL_NOT_FOUND)
                outcome = self._pull(topic, queue_id, offset, max_msgs, group, tags_codes)
            return self._answer(request, outcome, offset)
        except REFUSALS as exc:
            raise refusal(exc) from None

    def _pull(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        max_msgs: int,
        group: str,
        tags_codes: frozenset[int] | None,
    ) -> PullOutcome:
        if max_msgs <= 0:
            raise RequestRefused(ResponseCode.SYSTEM_ERROR, f"maxMsgNums={max_msgs}: must be > 0")
        if offset < 0:
            raise RequestRefused(ResponseCode.SYSTEM_ERROR, f"queueOffset={offset}: must be >= 0")
        # the maxTransfer* keys cap the answer (one record more if it alone is larger)
        return self.broker.pull(
            topic, queue_id, offset, max_msgs, group, MAX_TRANSFER_BYTES, tags_codes, capped=True
        )

    def _subscription(self, h: Header, group: str, topic: str, sys_flag: int) -> SubscriptionData:
        if sys_flag & FLAG_SUBSCRIPTION:
            expression_type = h.text("expressionType", "TAG")
            if expression_type != "TAG":
                raise RequestRefused(
                    ResponseCode.SUBSCRIPTION_PARSE_FAILED,
                    f"the broker does not support consumer to filter message by {expression_type}",
                )
            return SubscriptionData.build(topic, h.opt_text("subscription"), expression_type)
        found = self.consumers.find_subscription(group, topic)
        if found is None:
            raise RequestRefused(
                ResponseCode.SUBSCRIPTION_NOT_EXIST,
                f"the consumer's subscription of {topic} in group {group} does not exist "
                "(no heartbeat names it)",
            )
        return found

    def _answer(
        self, request: RemotingCommand, outcome: PullOutcome, offset: int
    ) -> RemotingCommand:
        result = outcome.result
        broker = self.broker
        suggest = outcome.suggest_which_broker_id
        status = result.status
        code = _code(outcome, offset)
        if code == ResponseCode.PULL_OFFSET_MOVED and broker.is_slave:
            # 4.9 (offsetCheckInSlave=false): a slave never moves a consumer; ask the master
            code = ResponseCode.PULL_RETRY_IMMEDIATELY
            suggest = 0
        header = {
            "suggestWhichBrokerId": suggest,
            "nextBeginOffset": result.next_begin_offset,
            "minOffset": result.min_offset,
            "maxOffset": result.max_offset,
        }
        response = request.response(
            code, None if code == ResponseCode.SUCCESS else status.value, header
        )
        if code == ResponseCode.SUCCESS and result.records:
            response.body_parts = result.records
            response.body_files = result.files
            broker.stats.pull_bytes += result.buffer_total_size
        return response


def _code(outcome: PullOutcome, offset: int) -> ResponseCode:
    """The store's answer as a 4.9 broker reports it."""
    status = outcome.result.status
    if outcome.retry_immediately or status is GetMessageStatus.NO_MATCHED_MESSAGE:
        return ResponseCode.PULL_RETRY_IMMEDIATELY
    if status is GetMessageStatus.FOUND:
        return ResponseCode.SUCCESS
    if status in (GetMessageStatus.OFFSET_OVERFLOW_ONE, GetMessageStatus.OFFSET_FOUND_NULL):
        return ResponseCode.PULL_NOT_FOUND
    if status is GetMessageStatus.NO_MESSAGE_IN_QUEUE:
        return ResponseCode.PULL_OFFSET_MOVED if offset != 0 else ResponseCode.PULL_NOT_FOUND
    return ResponseCode.PULL_OFFSET_MOVED  # OFFSET_TOO_SMALL, OFFSET_OVERFLOW_BADLY
