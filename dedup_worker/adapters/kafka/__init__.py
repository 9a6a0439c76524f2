"""The project's one Kafka adapter (confluent-kafka / librdkafka), used by every process.

- :mod:`.settings`: ``KafkaSettings`` and ``KafkaSecurity`` (TLS, SASL), the librdkafka
  configuration of every client, the partitioner every producer uses and the group timeouts;
- :mod:`.access`: ``check_access``, the start-up check that turns refused credentials or a
  failed TLS handshake into a ``ConfigError`` naming the settings;
- :mod:`.errors`: librdkafka errors translated into the project's exceptions;
- :mod:`.topics`: ``TopicAdmin`` and ``ensure_topics``;
- :mod:`.generations`: rolling topic generations (the embedded broker's bounded fetches);
- :mod:`.consumer` and :mod:`.producer`: the worker's group consumer and transactional
  decisions producer;
- :mod:`.publisher`: the crawler's bounded page publisher, and ``Sender``/``produce_all``;
- :mod:`.reader`: the decision reader (``TopicReader``, ``ReaderThread``, ``DecisionFeed``).

Callers see plain values (``Record``, offsets) and ``NeardupError`` subclasses, never a
client object or a librdkafka error.
"""

from dedup_worker.adapters.kafka.access import check_access
from dedup_worker.adapters.kafka.consumer import GroupMetadata, PageConsumer, RebalanceListener
from dedup_worker.adapters.kafka.errors import (
    BackendUnavailable,
    BrokerError,
    OwnershipLost,
    ProducerFenced,
    kafka_errors,
    translate,
    translate_error,
)
from dedup_worker.adapters.kafka.generations import generation_name, generations_of
from dedup_worker.adapters.kafka.producer import DecisionProducer, TransactionMode, fence
from dedup_worker.adapters.kafka.publisher import (
    DeliveryCallback,
    PagePublisher,
    Sender,
    produce_all,
)
from dedup_worker.adapters.kafka.reader import (
    DecisionFeed,
    PartitionOffsets,
    ReaderThread,
    TopicReader,
    committed_offsets,
    decode_record,
)
from dedup_worker.adapters.kafka.reader_generations import Start
from dedup_worker.adapters.kafka.records import (
    Offsets,
    Partition,
    Record,
    first_offsets,
    next_offsets,
    offsets_text,
    topic_partitions,
)
from dedup_worker.adapters.kafka.roller import (
    MIN_ROLL_INTERVAL_S,
    GenerationRoller,
    RollerThread,
    RollStep,
)
from dedup_worker.adapters.kafka.settings import (
    GROUP_TIMEOUTS,
    PARTITIONER,
    REQUEST_TIMEOUT_S,
    SECURITY_SETTINGS,
    KafkaSecurity,
    KafkaSettings,
)
from dedup_worker.adapters.kafka.topics import TopicAdmin, ensure_topics

__all__ = [
    "GROUP_TIMEOUTS",
    "MIN_ROLL_INTERVAL_S",
    "PARTITIONER",
    "REQUEST_TIMEOUT_S",
    "SECURITY_SETTINGS",
    "BackendUnavailable",
    "BrokerError",
    "DecisionFeed",
    "DecisionProducer",
    "DeliveryCallback",
    "GenerationRoller",
    "GroupMetadata",
    "KafkaSecurity",
    "KafkaSettings",
    "Offsets",
    "OwnershipLost",
    "PageConsumer",
    "PagePublisher",
    "Partition",
    "PartitionOffsets",
    "ProducerFenced",
    "ReaderThread",
    "RebalanceListener",
    "Record",
    "RollStep",
    "RollerThread",
    "Sender",
    "Start",
    "TopicAdmin",
    "TopicReader",
    "TransactionMode",
    "check_access",
    "committed_offsets",
    "decode_record",
    "ensure_topics",
    "fence",
    "first_offsets",
    "generation_name",
    "generations_of",
    "kafka_errors",
    "next_offsets",
    "offsets_text",
    "produce_all",
    "topic_partitions",
    "translate",
    "translate_error",
]
