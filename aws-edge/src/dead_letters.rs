//! Dead-letter queues: the messages a worker failed until SQS gave up on them, listed with why they are there
//! (their bodies and receive counts), sent back to their queue to be tried again once the cause is fixed, or
//! deleted for a forgotten organisation; and how many messages a queue holds.

use aws_sdk_sqs::{Client, types::MessageSystemAttributeName, types::QueueAttributeName};

/// Seconds a message read by a listing or a redrive stays hidden from other readers while it is handled.
const LISTING_VISIBILITY: i32 = 30;

/// A message on a dead-letter queue.
#[derive(Debug, Clone, PartialEq)]
pub struct DeadLetter {
    pub message_id: String,
    /// How often a worker received it before SQS moved it here.
    pub receive_count: u32,
    pub body: String,
}

/// Messages on a queue: waiting to be received, and received but not yet deleted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Depth {
    pub waiting: u64,
    pub in_flight: u64,
}

/// How many messages a queue (a job queue or a dead-letter queue) holds.
pub async fn depth(sqs: &Client, queue_url: &str) -> anyhow::Result<Depth> {
    let attributes = sqs
        .get_queue_attributes()
        .queue_url(queue_url)
        .attribute_names(QueueAttributeName::ApproximateNumberOfMessages)
        .attribute_names(QueueAttributeName::ApproximateNumberOfMessagesNotVisible)
        .send()
        .await?
        .attributes
        .unwrap_or_default();
    let number = |a: &QueueAttributeName| attributes.get(a).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    Ok(Depth {
        waiting: number(&QueueAttributeName::ApproximateNumberOfMessages),
        in_flight: number(&QueueAttributeName::ApproximateNumberOfMessagesNotVisible),
    })
}

/// The URL of the dead-letter queue of `queue_url` (from its redrive policy), if it has one.
pub async fn queue_of(sqs: &Client, queue_url: &str) -> anyhow::Result<Option<String>> {
    let attributes = sqs
        .get_queue_attributes()
        .queue_url(queue_url)
        .attribute_names(QueueAttributeName::RedrivePolicy)
        .send()
        .await?
        .attributes
        .unwrap_or_default();
    let Some(policy) = attributes.get(&QueueAttributeName::RedrivePolicy) else { return Ok(None) };
    let policy: serde_json::Value = serde_json::from_str(policy)?;
    let Some(name) = policy["deadLetterTargetArn"].as_str().and_then(|arn| arn.rsplit(':').next()) else {
        return Ok(None);
    };
    Ok(sqs.get_queue_url().queue_name(name).send().await?.queue_url)
}

/// A job queue's depth and how many messages wait on its dead-letter queue (`None`: it has none).
pub async fn depth_and_dead(sqs: &Client, queue_url: &str) -> anyhow::Result<(Depth, Option<u64>)> {
    let depth = depth(sqs, queue_url).await?;
    let dead = match queue_of(sqs, queue_url).await? {
        Some(dead) => Some(self::depth(sqs, &dead).await?.waiting),
        None => None,
    };
    Ok((depth, dead))
}

/// Every message on the dead-letter queue; each is visible again once listed.
pub async fn list(sqs: &Client, dead_letter_url: &str) -> anyhow::Result<Vec<DeadLetter>> {
    let received = receive_all(sqs, dead_letter_url).await?;
    for (_, handle) in &received {
        release(sqs, dead_letter_url, handle).await?;
    }
    Ok(received.into_iter().map(|(letter, _)| letter).collect())
}

/// Deletes the dead-letter queue's messages of one organisation (a JSON body whose `organization_id` is it): after
/// a forget, what its producers sent that failed is no longer kept for the queue's 14 days. The other messages are
/// visible again. Returns how many were deleted.
pub async fn purge(sqs: &Client, dead_letter_url: &str, organization_id: uuid::Uuid) -> anyhow::Result<usize> {
    let mut purged = 0;
    for (letter, handle) in receive_all(sqs, dead_letter_url).await? {
        let named = serde_json::from_str::<serde_json::Value>(&letter.body).ok().is_some_and(|body| {
            body.get("organization_id").and_then(|o| o.as_str()).and_then(|o| o.parse().ok()) == Some(organization_id)
        });
        if named {
            sqs.delete_message().queue_url(dead_letter_url).receipt_handle(handle).send().await?;
            purged += 1;
        } else {
            release(sqs, dead_letter_url, &handle).await?;
        }
    }
    Ok(purged)
}

/// Every message on the queue, each with the receipt handle that hides it for [`LISTING_VISIBILITY`] (receives wait
/// a second for messages, so an empty answer means an empty queue, not a sampled one).
async fn receive_all(sqs: &Client, dead_letter_url: &str) -> anyhow::Result<Vec<(DeadLetter, String)>> {
    let mut received: Vec<(DeadLetter, String)> = Vec::new();
    loop {
        let messages = sqs
            .receive_message()
            .queue_url(dead_letter_url)
            .max_number_of_messages(10)
            .visibility_timeout(LISTING_VISIBILITY)
            .wait_time_seconds(1)
            .message_system_attribute_names(MessageSystemAttributeName::ApproximateReceiveCount)
            .send()
            .await?
            .messages
            .unwrap_or_default();
        let fresh: Vec<(DeadLetter, String)> = messages
            .into_iter()
            .filter_map(|m| {
                let letter = DeadLetter {
                    receive_count: m
                        .attributes()
                        .and_then(|a| a.get(&MessageSystemAttributeName::ApproximateReceiveCount))
                        .and_then(|n| n.parse().ok())
                        .unwrap_or(0),
                    message_id: m.message_id.clone().unwrap_or_default(),
                    body: m.body.clone().unwrap_or_default(),
                };
                m.receipt_handle.map(|handle| (letter, handle))
            })
            .filter(|(m, _)| !received.iter().any(|(r, _)| r.message_id == m.message_id))
            .collect();
        if fresh.is_empty() {
            break;
        }
        received.extend(fresh);
    }
    Ok(received)
}

/// Makes a received message visible again.
async fn release(sqs: &Client, queue_url: &str, handle: &str) -> anyhow::Result<()> {
    sqs.change_message_visibility().queue_url(queue_url).receipt_handle(handle).visibility_timeout(0).send().await?;
    Ok(())
}

/// Moves every message of the dead-letter queue back to `queue_url` (sent, then deleted from the dead-letter
/// queue, so a failure in between leaves a copy rather than losing it); returns how many moved. A message sent
/// again carries the redriver's `SenderId`, not its producer's.
pub async fn redrive(sqs: &Client, dead_letter_url: &str, queue_url: &str) -> anyhow::Result<usize> {
    let mut moved = 0;
    loop {
        let messages = sqs
            .receive_message()
            .queue_url(dead_letter_url)
            .max_number_of_messages(10)
            .visibility_timeout(LISTING_VISIBILITY)
            .wait_time_seconds(1)
            .send()
            .await?
            .messages
            .unwrap_or_default();
        if messages.is_empty() {
            return Ok(moved);
        }
        for message in messages {
            sqs.send_message().queue_url(queue_url).message_body(message.body().unwrap_or_default()).send().await?;
            if let Some(handle) = message.receipt_handle() {
                sqs.delete_message().queue_url(dead_letter_url).receipt_handle(handle).send().await?;
            }
            moved += 1;
        }
    }
}
