//! The deployment template: clean under cfn-lint, and the invariants a reviewer would check by hand.

use std::collections::BTreeMap;

use serde_json::Value;

const TEMPLATE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../infra/template.yaml");

fn template() -> Value {
    serde_yaml_ng::from_str(&std::fs::read_to_string(TEMPLATE).unwrap()).expect("the template is YAML without tags")
}

fn resources_of(template: &Value, kind: &str) -> BTreeMap<String, Value> {
    template["Resources"]
        .as_object()
        .unwrap()
        .iter()
        .filter(|(_, r)| r["Type"] == kind)
        .map(|(name, r)| (name.clone(), r.clone()))
        .collect()
}

/// The logical name a `{"Fn::GetAtt": [Name, Attr]}` or `{"Ref": Name}` points at.
fn target(value: &Value) -> Option<&str> {
    value.get("Fn::GetAtt").and_then(|a| a[0].as_str()).or_else(|| value.get("Ref").and_then(Value::as_str))
}

#[test]
fn the_template_passes_cfn_lint() {
    let lint = std::env::var("MEMORY_CFN_LINT").expect("MEMORY_CFN_LINT (run the tests through `make test`)");
    let output = std::process::Command::new(lint).arg(TEMPLATE).output().expect("cfn-lint runs");
    let report = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success() && report.trim().is_empty(), "cfn-lint:\n{report}");
}

#[test]
fn every_queue_has_a_dead_letter_queue_an_alarm_and_a_visibility_timeout_six_times_its_functions() {
    let template = template();
    let queues = resources_of(&template, "AWS::SQS::Queue");
    let functions = resources_of(&template, "AWS::Serverless::Function");
    let alarms = resources_of(&template, "AWS::CloudWatch::Alarm");
    let global_timeout = template["Globals"]["Function"]["Timeout"].as_u64().unwrap();
    let work_queues: Vec<&String> = queues.keys().filter(|name| !name.ends_with("DeadLetterQueue")).collect();
    assert_eq!(work_queues.len(), 5, "{work_queues:?}");
    for name in work_queues {
        let queue = &queues[name];
        let redrive = &queue["Properties"]["RedrivePolicy"];
        let dlq = target(&redrive["deadLetterTargetArn"]).unwrap_or_else(|| panic!("{name} has no DLQ"));
        assert!(queues.contains_key(dlq), "{name}: {dlq}");
        assert!(redrive["maxReceiveCount"].as_u64().unwrap() >= 5, "{name}");
        let alarmed = alarms.values().any(|a| target(&a["Properties"]["Dimensions"][0]["Value"]) == Some(dlq));
        assert!(alarmed, "{dlq} has no alarm on its depth");

        let consumers: Vec<(&String, &Value)> = functions
            .iter()
            .flat_map(|(f, r)| r["Properties"]["Events"].as_object().into_iter().flatten().map(move |(_, e)| (f, e)))
            .filter(|(_, e)| e["Type"] == "SQS" && target(&e["Properties"]["Queue"]) == Some(name.as_str()))
            .collect();
        assert_eq!(consumers.len(), 1, "{name} has one consumer");
        let (function, event) = consumers[0];
        let types = event["Properties"]["FunctionResponseTypes"].as_array().cloned().unwrap_or_default();
        assert!(types.contains(&Value::from("ReportBatchItemFailures")), "{function} on {name}");
        let timeout = functions[function]["Properties"]["Timeout"].as_u64().unwrap_or(global_timeout);
        let visibility = queue["Properties"]["VisibilityTimeout"].as_u64().unwrap();
        assert!(visibility >= 6 * timeout, "{name}: visibility {visibility} s for a {timeout} s function");
    }
}

#[test]
fn every_function_has_its_own_role_and_no_data_plane_action_on_every_resource() {
    let template = template();
    let functions = resources_of(&template, "AWS::Serverless::Function");
    assert!(functions.len() >= 8, "{}", functions.len());
    assert_eq!(template["Parameters"]["Architecture"]["Default"], "arm64");
    assert_eq!(template["Globals"]["Function"]["Runtime"], "provided.al2023");
    for (name, function) in &functions {
        assert!(function["Properties"].get("Role").is_none(), "{name} shares a role (SAM gives each its own)");
        for policy in function["Properties"]["Policies"].as_array().unwrap_or_else(|| panic!("{name} has no policies"))
        {
            for statement in policy["Statement"].as_array().into_iter().flatten() {
                let resources: Vec<&Value> = match &statement["Resource"] {
                    Value::Array(list) => list.iter().collect(),
                    other => vec![other],
                };
                assert!(resources.iter().all(|r| *r != "*"), "{name}: {statement}");
            }
        }
    }
    let roles = resources_of(&template, "AWS::IAM::Role");
    for (name, role) in roles {
        let statements = role["Properties"]["Policies"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|p| p["PolicyDocument"]["Statement"].as_array().cloned().unwrap_or_default());
        for statement in statements {
            assert_ne!(statement["Resource"], "*", "{name}: {statement}");
        }
    }
}

/// The list of jobs exists once (`JobType`): each job's queue, worker function, binary and local queue follow it.
#[test]
fn every_job_has_its_queue_worker_function_binary_and_local_queue() {
    use memory_core::jobs::JobType;
    let template = template();
    let queues = resources_of(&template, "AWS::SQS::Queue");
    let functions = resources_of(&template, "AWS::Serverless::Function");
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    let read = |path: &str| std::fs::read_to_string(format!("{root}/{path}")).unwrap_or_default();
    let (manifest, local_queues, package) =
        (read("functions/workers/Cargo.toml"), read("scripts/aws_resources.py"), read("scripts/package.sh"));
    assert!(package.contains("-p workers"), "scripts/package.sh builds the workers crate");
    let work_queues = queues.keys().filter(|name| !name.ends_with("DeadLetterQueue")).count();
    assert_eq!(work_queues, JobType::ALL.len(), "one work queue per job type");
    for job in JobType::ALL {
        let function = job.function();
        let queue_name = format!("memory-{function}-${{Stage}}");
        let (queue, _) = queues
            .iter()
            .find(|(_, q)| q["Properties"]["QueueName"]["Fn::Sub"] == queue_name.as_str())
            .unwrap_or_else(|| panic!("the template has no queue {queue_name} for {}", job.as_str()));
        let consumer = functions.iter().find(|(_, f)| {
            f["Properties"]["Events"]
                .as_object()
                .into_iter()
                .flatten()
                .any(|(_, e)| e["Type"] == "SQS" && target(&e["Properties"]["Queue"]) == Some(queue.as_str()))
        });
        let (name, consumer) = consumer.unwrap_or_else(|| panic!("no function consumes {queue}"));
        let code = format!("../target/lambda/{function}/bootstrap.zip");
        assert_eq!(consumer["Properties"]["CodeUri"], code.as_str(), "{name} runs the {function} package");
        for (name, f) in &functions {
            if let Some(value) = f["Properties"]["Environment"]["Variables"].get(job.queue_variable()) {
                assert_eq!(target(value), Some(queue.as_str()), "{name}: {} names {queue}", job.queue_variable());
            }
        }
        assert!(manifest.contains(&format!("name = \"{function}\"")), "functions/workers has no binary {function}");
        let main = read(&format!("functions/workers/src/bin/{function}.rs"));
        assert!(main.contains(&format!("JobType::{job:?}")), "the {function} binary serves {}", job.as_str());
        let local = format!("\"memory-{function}\": \"{}\"", job.queue_variable());
        assert!(local_queues.contains(&local), "scripts/aws_resources.py lacks {local}");
    }
}
