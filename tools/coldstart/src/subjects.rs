//! What the bench starts: each function of each implementation, with the configuration and the event
//! it gets, and the answer it must give.

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{json, Value};
use tgq_fake_lambda::Launch;

/// Parameter names and values the fake SSM serves (the bot token is the fake Bot API's).
pub const WEBHOOK_SECRET_PARAM: &str = "/tgq/webhook-secret";
pub const WEBHOOK_SECRET: &str = "tgq-example-secret";
pub const BOT_TOKEN_PARAM: &str = "/tgq/bot-token";

/// Who implements the functions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Implementation {
    Tgq,
    Node,
    Python,
}

impl Implementation {
    pub const ALL: [Implementation; 3] = [
        Implementation::Tgq,
        Implementation::Node,
        Implementation::Python,
    ];
}

impl fmt::Display for Implementation {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str(match self {
            Implementation::Tgq => "tgq (Rust)",
            Implementation::Node => "Node.js (grammY)",
            Implementation::Python => "Python (aiogram)",
        })
    }
}

/// Which of the two functions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Function {
    Webhook,
    Worker,
}

impl Function {
    pub const ALL: [Function; 2] = [Function::Webhook, Function::Worker];

    /// The Cargo binary and script name.
    pub fn name(self) -> &'static str {
        match self {
            Function::Webhook => "webhook",
            Function::Worker => "worker",
        }
    }

    /// The first event: one that each implementation answers without an AWS call, so the figure is
    /// the function's own start and first answer, not a fake AWS service's speed.
    pub fn event(self) -> &'static str {
        match self {
            Function::Webhook => include_str!("../../../events/webhook/wrong_secret.json"),
            Function::Worker => include_str!("../../../events/sqs/empty.json"),
        }
    }

    /// Whether `answer` is the right one for [`Function::event`].
    pub fn accepts(self, answer: &Value) -> bool {
        match self {
            Function::Webhook => answer["statusCode"] == json!(401),
            Function::Worker => answer == &json!({"batchItemFailures": []}),
        }
    }

    /// The warm events, after the first: a real update, which each implementation stores and
    /// enqueues (the webhook) or claims and answers with one reply (the worker), against the fake
    /// AWS endpoint and the fake Bot API; both answer at once, so the time is the function's own.
    pub fn warm_event(self) -> &'static str {
        match self {
            Function::Webhook => include_str!("../../../events/webhook/message.json"),
            Function::Worker => include_str!("../../../events/sqs/single.json"),
        }
    }

    /// The AWS requests each implementation makes for one warm event, as tgq's functions make
    /// them (`testing/e2e/tests/e2e/requests.rs`): the webhook's put and send; the worker's claim, state
    /// read, the reply's intent and the settle.
    pub fn aws_calls_per_update(self) -> usize {
        match self {
            Function::Webhook => 2,
            Function::Worker => 4,
        }
    }

    /// Whether `answer` is the right one for [`Function::warm_event`].
    pub fn accepts_warm(self, answer: &Value) -> bool {
        match self {
            Function::Webhook => answer["statusCode"] == json!(200),
            Function::Worker => answer == &json!({"batchItemFailures": []}),
        }
    }

    /// The answer [`Function::accepts`], in words.
    pub fn expected(self) -> &'static str {
        match self {
            Function::Webhook => "statusCode 401",
            Function::Worker => r#"{"batchItemFailures":[]}"#,
        }
    }
}

impl fmt::Display for Function {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str(self.name())
    }
}

/// One implementation of one function, ready to start.
#[derive(Clone, Debug)]
pub struct Subject {
    pub implementation: Implementation,
    pub function: Function,
    pub launch: Launch,
}

/// How to start each implementation.
pub struct Programs {
    /// tgq's packaged `bootstrap` for each function.
    pub tgq: Box<dyn Fn(Function) -> PathBuf>,
    /// The folder holding the Node.js equivalents and their `node_modules`, and `node`.
    pub node: Option<(PathBuf, PathBuf)>,
    /// The folder holding the Python equivalents, and the interpreter of their virtualenv.
    pub python: Option<(PathBuf, PathBuf)>,
}

/// Where the subjects' calls go: the fake AWS endpoint and the fake Bot API.
pub struct Fakes<'a> {
    pub aws: &'a str,
    pub telegram: &'a str,
}

/// Every subject, each configured the same way: the function's configuration as template.yaml gives
/// it, secrets by SSM parameter name from the fake AWS endpoint, logs into `logs`.
pub fn subjects(programs: &Programs, fakes: &Fakes<'_>, logs: &Path) -> Vec<Subject> {
    let mut subjects = Vec::new();
    for implementation in Implementation::ALL {
        for function in Function::ALL {
            let script = |folder: &Path, interpreter: &Path, extension: &str| {
                let mut launch = Launch::new(interpreter);
                launch.args = vec![format!("{}.{extension}", function.name())];
                launch.current_dir = Some(folder.to_path_buf());
                launch
            };
            let launch = match implementation {
                Implementation::Tgq => {
                    let bootstrap = (programs.tgq)(function);
                    let mut launch = Launch::new(&bootstrap);
                    launch.current_dir = bootstrap.parent().map(Path::to_path_buf);
                    launch
                }
                Implementation::Node => match &programs.node {
                    Some((folder, node)) => script(folder, node, "mjs"),
                    None => continue,
                },
                Implementation::Python => match &programs.python {
                    Some((folder, python)) => script(folder, python, "py"),
                    None => continue,
                },
            };
            subjects.push(Subject {
                implementation,
                function,
                launch: configure(launch, function, fakes, logs, implementation),
            });
        }
    }
    subjects
}

fn configure(
    launch: Launch,
    function: Function,
    fakes: &Fakes<'_>,
    logs: &Path,
    implementation: Implementation,
) -> Launch {
    let aws = fakes.aws;
    let mut launch = launch
        .env("AWS_ENDPOINT_URL", aws)
        .env("AWS_REGION", "us-east-1")
        .env("AWS_DEFAULT_REGION", "us-east-1")
        .env("AWS_ACCESS_KEY_ID", "coldstart-bench")
        .env("AWS_SECRET_ACCESS_KEY", "coldstart-bench")
        .env("AWS_LAMBDA_FUNCTION_NAME", format!("tgq-{function}"))
        .env("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST")
        .env("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "256")
        .env("RUST_LOG", "info")
        .env("TGQ_BOT_ID", "demo")
        .env("TGQ_TABLE", "tgq-updates")
        .env(
            "TGQ_QUEUE_URL",
            format!("{aws}/123456789012/tgq-updates.fifo"),
        )
        .env(
            "TGQ_DLQ_URL",
            format!("{aws}/123456789012/tgq-updates-dlq.fifo"),
        )
        .env("TELEGRAM_API_URL", fakes.telegram)
        // Every warm update is in the same chat: tgq's pacer would hold each reply a second
        // (Telegram's per-chat limit), which the equivalents do not do; what is measured is the
        // function's own time, so the pacer is off, as in the local-mode bench.
        .env("TGQ_RATE_PER_SECOND", "0")
        .env("TGQ_RATE_PER_CHAT_PER_SECOND", "0")
        .env("TGQ_RATE_PER_GROUP_PER_MINUTE", "0");
    launch = match function {
        Function::Webhook => launch.env("TGQ_WEBHOOK_SECRET_PARAM", WEBHOOK_SECRET_PARAM),
        Function::Worker => launch.env("TELEGRAM_BOT_TOKEN_PARAM", BOT_TOKEN_PARAM),
    };
    if let Some(dir) = launch.current_dir.clone() {
        launch = launch.env("LAMBDA_TASK_ROOT", dir.display().to_string());
    }
    let tag = match implementation {
        Implementation::Tgq => "tgq",
        Implementation::Node => "node",
        Implementation::Python => "python",
    };
    launch.log = Some(logs.join(format!("{tag}-{function}.log")));
    launch.timeout = Duration::from_secs(30);
    launch
}
