//! CloudWatch's own check of a dashboard body, done before CloudFormation does it: `PutDashboard`
//! validates the body it is given and a rejected dashboard rolls the whole stack back, while
//! cfn-lint, `sam validate` and moto take the body as an opaque string.
//!
//! [`problems`] follows the structure CloudWatch documents for dashboard bodies ("Dashboard Body
//! Structure and Syntax" in the CloudWatch API reference): the widget types, the 24-column grid,
//! and for a metric widget its `region`, `view`, `period`, and `metrics` as an array of arrays, each
//! either a metric (namespace, name, dimension pairs, an optional options object) or one expression
//! object whose `id` is unique and starts with a lower-case letter. [`sub`] resolves a `Fn::Sub`
//! string the way CloudFormation does before the body reaches CloudWatch.

use std::collections::HashSet;

use serde_json::{Map, Value};

/// The widget types a dashboard body may hold.
const WIDGET_TYPES: [&str; 6] = ["metric", "text", "log", "alarm", "explorer", "custom"];
/// The dashboard grid is 24 columns wide.
const GRID_COLUMNS: u64 = 24;
/// The tallest widget CloudWatch takes, in grid rows.
const MAX_HEIGHT: u64 = 1000;
/// How a metric widget may draw its metrics.
const VIEWS: [&str; 6] = ["timeSeries", "singleValue", "gauge", "bar", "pie", "table"];
/// Periods under a minute that CloudWatch accepts (high-resolution metrics); longer ones are
/// multiples of 60.
const SHORT_PERIODS: [u64; 4] = [1, 5, 10, 30];
/// Keys of a metric's (or an expression's) rendering options.
const METRIC_OPTIONS: [&str; 9] = [
    "accountId",
    "color",
    "id",
    "label",
    "period",
    "region",
    "stat",
    "visible",
    "yAxis",
];

/// Every way `body` breaks CloudWatch's rules, one line each; empty when CloudWatch would take it.
pub fn problems(body: &Value) -> Vec<String> {
    let mut found = Vec::new();
    let Some(widgets) = body.get("widgets").and_then(Value::as_array) else {
        found.push("the body has no `widgets` array".to_owned());
        return found;
    };
    for (index, widget) in widgets.iter().enumerate() {
        let name = widget
            .pointer("/properties/title")
            .and_then(Value::as_str)
            .map_or_else(
                || format!("widget {index}"),
                |t| format!("widget {index} ({t:?})"),
            );
        let mut say = |problem: String| found.push(format!("{name}: {problem}"));
        check_widget(widget, &mut say);
    }
    found
}

fn check_widget(widget: &Value, say: &mut impl FnMut(String)) {
    let Some(widget) = widget.as_object() else {
        return say("is not an object".to_owned());
    };
    let kind = widget.get("type").and_then(Value::as_str).unwrap_or("");
    if !WIDGET_TYPES.contains(&kind) {
        say(format!("type {kind:?} is not one of {WIDGET_TYPES:?}"));
    }
    let number = |key: &str| widget.get(key).map(|v| v.as_u64().ok_or(v));
    let x = match number("x") {
        Some(Ok(x)) if x < GRID_COLUMNS => x,
        Some(Ok(x)) => {
            say(format!("x {x} is outside the grid's 0-23"));
            0
        }
        Some(Err(v)) => {
            say(format!("x {v} is not a whole number"));
            0
        }
        None => 0,
    };
    if let Some(Err(v)) = number("y") {
        say(format!("y {v} is not a whole number"));
    }
    // Both default to 6 when left out.
    let width = match number("width") {
        Some(Ok(w)) if (1..=GRID_COLUMNS).contains(&w) => w,
        Some(Ok(w)) => {
            say(format!("width {w} is outside 1-24"));
            6
        }
        Some(Err(v)) => {
            say(format!("width {v} is not a whole number"));
            6
        }
        None => 6,
    };
    if x + width > GRID_COLUMNS {
        say(format!(
            "x {x} + width {width} runs past the grid's 24 columns"
        ));
    }
    match number("height") {
        Some(Ok(h)) if (1..=MAX_HEIGHT).contains(&h) => {}
        Some(Ok(h)) => say(format!("height {h} is outside 1-{MAX_HEIGHT}")),
        Some(Err(v)) => say(format!("height {v} is not a whole number")),
        None => {}
    }
    let Some(properties) = widget.get("properties").and_then(Value::as_object) else {
        return say("has no `properties` object".to_owned());
    };
    match kind {
        "metric" => check_metric_widget(properties, say),
        "text" if !properties.get("markdown").is_some_and(Value::is_string) => {
            say("a text widget needs `markdown`".to_owned())
        }
        "alarm" if !properties.get("alarms").is_some_and(Value::is_array) => {
            say("an alarm widget needs an `alarms` array".to_owned())
        }
        "log" if !properties.get("query").is_some_and(Value::is_string) => {
            say("a log widget needs a `query`".to_owned())
        }
        _ => {}
    }
}

fn check_metric_widget(properties: &Map<String, Value>, say: &mut impl FnMut(String)) {
    if !properties.get("region").is_some_and(Value::is_string) {
        say("a metric widget needs a `region` string".to_owned());
    }
    if let Some(view) = properties.get("view") {
        if !view.as_str().is_some_and(|v| VIEWS.contains(&v)) {
            say(format!("view {view} is not one of {VIEWS:?}"));
        }
    }
    if let Some(period) = properties.get("period") {
        check_period(period, "the widget's", say);
    }
    let Some(metrics) = properties.get("metrics").and_then(Value::as_array) else {
        return say("a metric widget needs a `metrics` array".to_owned());
    };
    let mut ids = HashSet::new();
    for (index, entry) in metrics.iter().enumerate() {
        let mut say = |problem: String| say(format!("metrics[{index}] {problem}"));
        let Some(entry) = entry.as_array() else {
            say(format!(
                "is not an array (`metrics` is an array of arrays): {entry}"
            ));
            continue;
        };
        check_metric(entry, &mut ids, &mut say);
    }
}

/// One entry of `metrics`: `[namespace, name, dimension, value, …, {options}]`, `["…", …]` (`"."`
/// repeats the entry above's value in its place), or `[{expression…}]`.
fn check_metric(entry: &[Value], ids: &mut HashSet<String>, say: &mut impl FnMut(String)) {
    let (options, fields) = match entry.split_last() {
        Some((Value::Object(options), fields)) => (Some(options), fields),
        _ => (None, entry),
    };
    if let Some(options) = options {
        check_options(options, fields.is_empty(), ids, say);
    }
    if fields.is_empty() {
        if !options.is_some_and(|o| o.contains_key("expression")) {
            say("has neither a metric nor an expression".to_owned());
        }
        return;
    }
    if options.is_some_and(|o| o.contains_key("expression")) {
        say("mixes an expression with a metric's fields".to_owned());
    }
    if let Some(field) = fields.iter().find(|f| !f.is_string()) {
        say(format!(
            "has {field} where a string belongs (namespace, name, dimensions)"
        ));
    }
    if fields.len() < 2 {
        say("names no metric (namespace and metric name)".to_owned());
    } else if fields.len() % 2 != 0 {
        say("has a dimension name without its value".to_owned());
    }
}

fn check_options(
    options: &Map<String, Value>,
    expression_only: bool,
    ids: &mut HashSet<String>,
    say: &mut impl FnMut(String),
) {
    for key in options.keys() {
        let allowed = METRIC_OPTIONS.contains(&key.as_str()) || key == "expression";
        if !allowed {
            say(format!(
                "has the option {key:?}, which CloudWatch does not know"
            ));
        }
    }
    if let Some(expression) = options.get("expression") {
        if expression.as_str().is_none_or(|e| e.trim().is_empty()) {
            say("has an empty expression".to_owned());
        }
    }
    match options.get("id").map(Value::as_str) {
        Some(Some(id)) => {
            if !valid_id(id) {
                say(format!(
                    "id {id:?} must start with a lower-case letter and hold only letters, digits and '_'"
                ));
            }
            if !ids.insert(id.to_owned()) {
                say(format!("id {id:?} is used twice in the widget"));
            }
        }
        Some(None) => say("has an id that is not a string".to_owned()),
        None if expression_only => say("is an expression without an id".to_owned()),
        None => {}
    }
    if let Some(period) = options.get("period") {
        check_period(period, "its", say);
    }
    if let Some(axis) = options.get("yAxis") {
        if !matches!(axis.as_str(), Some("left" | "right")) {
            say(format!("yAxis {axis} is neither \"left\" nor \"right\""));
        }
    }
}

fn check_period(period: &Value, whose: &str, say: &mut impl FnMut(String)) {
    match period.as_u64() {
        Some(p) if SHORT_PERIODS.contains(&p) || (p > 0 && p % 60 == 0) => {}
        _ => say(format!(
            "{whose} period {period} is not 1, 5, 10, 30 or a multiple of 60"
        )),
    }
}

/// CloudWatch's rule for a metric's `id`.
fn valid_id(id: &str) -> bool {
    let mut chars = id.chars();
    chars.next().is_some_and(|c| c.is_ascii_lowercase())
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// `text` as `Fn::Sub` leaves it: every `${Name}` replaced by `value(Name)`, `${!Literal}` kept as
/// `${Literal}`. A name with no value is an error, as it is for CloudFormation.
pub fn sub(text: &str, value: impl Fn(&str) -> Option<String>) -> Result<String, String> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let end = after
            .find('}')
            .ok_or_else(|| format!("an unclosed ${{ at {:?}", &rest[start..]))?;
        let name = &after[..end];
        match name.strip_prefix('!') {
            Some(literal) => {
                out.push_str("${");
                out.push_str(literal);
                out.push('}');
            }
            None => out.push_str(&value(name).ok_or_else(|| format!("${{{name}}} has no value"))?),
        }
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use serde_json::json;

    use super::*;

    fn widget(metrics: Value) -> Value {
        json!({ "widgets": [{
            "type": "metric", "x": 0, "y": 0, "width": 12, "height": 6,
            "properties": { "region": "us-east-1", "title": "t", "metrics": metrics }
        }]})
    }

    #[test]
    fn a_body_of_metrics_and_one_expression_per_entry_passes() {
        let body = widget(json!([
            ["tgq", "Processed", "BotId", "b", { "stat": "Sum", "label": "Processed" }],
            [".", "Retried", ".", "."],
            [{ "expression": "SEARCH('{tgq,BotId} x', 'Sum', 60)", "id": "retried", "label": "x" }]
        ]));
        assert_eq!(problems(&body), Vec::<String>::new());
    }

    #[test]
    fn a_bare_expression_object_in_metrics_is_refused() {
        let body = widget(json!([
            ["tgq", "Processed", "BotId", "b"],
            { "expression": "SEARCH('x', 'Sum', 60)", "id": "retried" }
        ]));
        let found = problems(&body);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].contains("metrics[1] is not an array"), "{found:?}");
    }

    #[test]
    fn expression_ids_must_be_lower_case_first_and_unique() {
        let body = widget(json!([
            [{ "expression": "a", "id": "Total" }],
            [{ "expression": "b", "id": "total" }],
            [{ "expression": "c", "id": "total" }],
            [{ "expression": "d" }]
        ]));
        let found = problems(&body).join("\n");
        assert!(
            found.contains("\"Total\" must start with a lower-case"),
            "{found}"
        );
        assert!(found.contains("\"total\" is used twice"), "{found}");
        assert!(
            found.contains("metrics[3] is an expression without an id"),
            "{found}"
        );
    }

    #[test]
    fn positions_sizes_types_regions_and_periods_are_checked() {
        let body = json!({ "widgets": [
            { "type": "graph", "x": 20, "width": 6, "height": 0, "properties": { "markdown": "m" } },
            { "type": "metric", "properties": { "period": 90, "view": "line", "metrics": [["tgq"]] } }
        ]});
        let found = problems(&body).join("\n");
        for expected in [
            "type \"graph\"",
            "runs past the grid",
            "height 0",
            "needs a `region`",
            "period 90",
            "view \"line\"",
            "names no metric",
        ] {
            assert!(found.contains(expected), "{expected} in:\n{found}");
        }
    }

    #[test]
    fn sub_replaces_names_keeps_bang_literals_and_refuses_unknown_names() {
        let values = BTreeMap::from([("AWS::Region", "eu-west-1"), ("BotId", "mybot")]);
        let value = |name: &str| values.get(name).map(|v| v.to_string());
        assert_eq!(
            sub("${AWS::Region}/${BotId}/${!Kept}", value).unwrap(),
            "eu-west-1/mybot/${Kept}"
        );
        assert!(sub("${Missing}", value).unwrap_err().contains("Missing"));
    }
}
