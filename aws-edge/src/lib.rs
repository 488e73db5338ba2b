//! The AWS edge shared by the functions: [`sqs`] turns an SQS batch into job handler calls and partial batch
//! failures; [`relay`] plugs EventBridge and SQS into the core's outbox relay; [`dead_letters`] lists and redrives
//! what the workers failed for good.

pub mod dead_letters;
pub mod relay;
pub mod sqs;
