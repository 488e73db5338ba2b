"""Creates the local SQS queues (each with a dead-letter queue) and the EventBridge bus, and writes their
addresses as shell exports to the file named by the first argument. Idempotent."""
import json
import os
import sys

import boto3

# Queue name -> the variable naming its URL for the services.
QUEUES = {
    "memory-ingest": "MEMORY_INGEST_QUEUE_URL",
    "memory-dedup": "MEMORY_DEDUP_QUEUE_URL",
    "memory-contradiction": "MEMORY_CONTRADICTION_QUEUE_URL",
    "memory-synthesis": "MEMORY_SYNTHESIS_QUEUE_URL",
    "memory-file-scan": "MEMORY_FILE_SCAN_QUEUE_URL",
}
BUS = os.environ.get("MEMORY_EVENT_BUS", "agent-memory")
session = boto3.session.Session(
    aws_access_key_id="testing", aws_secret_access_key="testing", region_name="us-east-1"
)
endpoint = os.environ["AWS_ENDPOINT_URL"]
sqs = session.client("sqs", endpoint_url=endpoint)
events = session.client("events", endpoint_url=endpoint)

exports = []
for name, variable in QUEUES.items():
    dlq_url = sqs.create_queue(QueueName=f"{name}-dlq")["QueueUrl"]
    dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    url = sqs.create_queue(
        QueueName=name,
        Attributes={
            "VisibilityTimeout": "60",
            "RedrivePolicy": json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": "5"}),
        },
    )["QueueUrl"]
    exports.append(f"export {variable}={url}\n")

if BUS not in [b["Name"] for b in events.list_event_buses()["EventBuses"]]:
    events.create_event_bus(Name=BUS)

# Every domain event of the bus is also copied to a queue, so a developer can watch them (make events).
watch_url = sqs.create_queue(QueueName="memory-domain-events")["QueueUrl"]
watch_arn = sqs.get_queue_attributes(QueueUrl=watch_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
events.put_rule(Name="watch-domain-events", EventBusName=BUS, EventPattern=json.dumps({"source": ["agent-memory"]}))
events.put_targets(Rule="watch-domain-events", EventBusName=BUS, Targets=[{"Id": "watch", "Arn": watch_arn}])
exports.append(f"export MEMORY_EVENTS_WATCH_QUEUE_URL={watch_url}\n")
# The principal the local tools send as (SQS reports it to the workers as SenderId): make run registers it as
# a producer of the demo organisations.
probe = sqs.create_queue(QueueName="memory-sender-probe")["QueueUrl"]
sqs.send_message(QueueUrl=probe, MessageBody="probe")
received = sqs.receive_message(QueueUrl=probe, AttributeNames=["SenderId"])["Messages"][0]
sqs.delete_message(QueueUrl=probe, ReceiptHandle=received["ReceiptHandle"])
exports.append(f"export MEMORY_LOCAL_SENDER_ID={received['Attributes']['SenderId']}\n")
with open(sys.argv[1], "w") as out:
    out.writelines(exports)
print(f"[stack] queues {', '.join(QUEUES)} (with DLQs) and event bus {BUS} ready")
