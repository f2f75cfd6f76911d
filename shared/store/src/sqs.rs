//! Delayed jobs on SQS: `DelaySeconds` schedules sworn pass 2 and webhook retries; in
//! AWS the worker Lambda consumes the queue as its event source, and `receive`/`ack`
//! serve tests and local polling.

use async_trait::async_trait;
use aws_sdk_sqs::Client;
use aws_sdk_sqs::types::MessageSystemAttributeName;

use crate::{Delivery, Job, JobQueue, MAX_DELAY_SECS, Result, StoreError};

#[derive(Clone)]
pub struct SqsQueue {
    client: Client,
    queue_url: String,
}

fn unavailable<E: std::fmt::Debug>(e: aws_sdk_sqs::error::SdkError<E>) -> StoreError {
    StoreError::Unavailable(format!("{e:?}").chars().take(500).collect())
}

impl SqsQueue {
    pub fn new(client: Client, queue_url: impl Into<String>) -> SqsQueue {
        SqsQueue {
            client,
            queue_url: queue_url.into(),
        }
    }

    pub fn from_config(config: &aws_types::SdkConfig, queue_url: impl Into<String>) -> SqsQueue {
        SqsQueue::new(Client::new(config), queue_url)
    }

    /// Job bodies as they travel: `{"kind","payload"}`.
    pub fn encode(job: &Job) -> Result<String> {
        serde_json::to_string(job).map_err(|e| StoreError::Corrupt(e.to_string()))
    }

    pub fn decode(body: &str) -> Result<Job> {
        serde_json::from_str(body).map_err(|e| StoreError::Corrupt(e.to_string()))
    }
}

#[async_trait]
impl JobQueue for SqsQueue {
    async fn enqueue(&self, job: &Job, delay: std::time::Duration) -> Result<()> {
        // Whole seconds, rounded up: a job never runs before its delay.
        let secs = delay
            .as_millis()
            .div_ceil(1000)
            .min(u128::from(MAX_DELAY_SECS));
        let delay = i32::try_from(secs).unwrap_or(900);
        self.client
            .send_message()
            .queue_url(&self.queue_url)
            .message_body(SqsQueue::encode(job)?)
            .delay_seconds(delay)
            .send()
            .await
            .map(|_| ())
            .map_err(unavailable)
    }

    async fn receive(&self, max: u32, visibility_secs: u32) -> Result<Vec<Delivery>> {
        let out = self
            .client
            .receive_message()
            .queue_url(&self.queue_url)
            .max_number_of_messages(i32::try_from(max.clamp(1, 10)).unwrap_or(10))
            .visibility_timeout(i32::try_from(visibility_secs).unwrap_or(30))
            .wait_time_seconds(0)
            .message_system_attribute_names(MessageSystemAttributeName::ApproximateReceiveCount)
            .send()
            .await
            .map_err(unavailable)?;
        let mut deliveries = Vec::new();
        for m in out.messages.unwrap_or_default() {
            let (Some(body), Some(receipt)) = (m.body.as_deref(), m.receipt_handle.clone()) else {
                continue;
            };
            let receive_count = m
                .attributes
                .as_ref()
                .and_then(|a| a.get(&MessageSystemAttributeName::ApproximateReceiveCount))
                .and_then(|c| c.parse().ok())
                .unwrap_or(1);
            deliveries.push(Delivery {
                job: SqsQueue::decode(body)?,
                receipt,
                receive_count,
            });
        }
        Ok(deliveries)
    }

    async fn ack(&self, receipt: &str) -> Result<()> {
        self.client
            .delete_message()
            .queue_url(&self.queue_url)
            .receipt_handle(receipt)
            .send()
            .await
            .map(|_| ())
            .map_err(unavailable)
    }
}
