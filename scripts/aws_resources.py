"""Creates the local SQS queues (each with a dead-letter queue) and the EventBridge bus. Idempotent."""
import json
import os

import boto3

QUEUES = ["memory-dedup", "memory-contradiction", "memory-synthesis", "memory-file-scan"]
BUS = os.environ.get("MEMORY_EVENT_BUS", "agent-memory")
session = boto3.session.Session(
    aws_access_key_id="testing", aws_secret_access_key="testing", region_name="us-east-1"
)
endpoint = os.environ["AWS_ENDPOINT_URL"]
sqs = session.client("sqs", endpoint_url=endpoint)
events = session.client("events", endpoint_url=endpoint)

for name in QUEUES:
    dlq_url = sqs.create_queue(QueueName=f"{name}-dlq")["QueueUrl"]
    dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    sqs.create_queue(
        QueueName=name,
        Attributes={
            "VisibilityTimeout": "60",
            "RedrivePolicy": json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": "5"}),
        },
    )

if BUS not in [b["Name"] for b in events.list_event_buses()["EventBuses"]]:
    events.create_event_bus(Name=BUS)
print(f"[stack] queues {', '.join(QUEUES)} (with DLQs) and event bus {BUS} ready")
