//! `Invoke-WebRequest` (`iwr`, and `curl`/`wget` in Windows PowerShell 5.1) and
//! `Invoke-RestMethod` (`irm`), shown as Windows PowerShell 5.1 shows their results and errors.

use bytes::Bytes;
use http::Method;

use super::http_client::{self, Fetch, FetchError, Request, Response, UrlError};
use super::powershell::{self, ErrorRecord, Param, PsObject, View, switch, value};
use super::shell::Call;
use super::term::Output;
use super::words::parse_hashtable;
use super::{Env, MAX_NET_TIMEOUT, cap_timeout, note, parse_seconds, web};

/// `-MaximumRedirection`'s default.
const DEFAULT_REDIRECTS: u32 = 5;

const PARAMS: [Param; 15] = [
    value("Uri", &[]),
    value("Method", &[]),
    value("Body", &[]),
    value("Headers", &[]),
    value("ContentType", &[]),
    value("UserAgent", &[]),
    value("TimeoutSec", &[]),
    value("MaximumRedirection", &[]),
    value("OutFile", &[]),
    switch("UseBasicParsing", &[]),
    switch("PassThru", &[]),
    switch("UseDefaultCredentials", &[]),
    switch("DisableKeepAlive", &[]),
    switch("SkipCertificateCheck", &[]),
    switch("SkipHttpErrorCheck", &[]),
];

/// Runs `Invoke-WebRequest`, or `Invoke-RestMethod` when `rest`.
pub(super) async fn invoke(env: &Env<'_>, out: &Output, call: &Call<'_>, rest: bool) -> i32 {
    let (command, full) = if rest {
        (
            "Invoke-RestMethod",
            "Microsoft.PowerShell.Commands.InvokeRestMethodCommand",
        )
    } else {
        (
            "Invoke-WebRequest",
            "Microsoft.PowerShell.Commands.InvokeWebRequestCommand",
        )
    };
    let fail = |message: String, category: &'static str, reason: &'static str, id: &'static str| {
        let record = powershell::error_record(
            call.text,
            &ErrorRecord {
                command,
                message: &message,
                category,
                target: &match category {
                    "InvalidOperation" => "System.Net.HttpWebRequest:HttpWebRequest".to_string(),
                    _ => ":".to_string(),
                },
                reason,
                error_id: &format!("{id},{full}"),
            },
        );
        async move {
            out.err(&record).await;
            1
        }
    };
    let bound = match powershell::bind(call.args, &PARAMS) {
        Ok(bound) => bound,
        Err(e) => {
            out.err(&powershell::bind_error(call.text, command, full, &e))
                .await;
            return 1;
        }
    };
    let Some(raw_uri) = bound.get_or_positional("Uri", 0) else {
        return fail(
            "Cannot process command because of one or more missing mandatory parameters: Uri."
                .to_string(),
            "InvalidArgument",
            "ParameterBindingException",
            "MissingMandatoryParameter",
        )
        .await;
    };
    let url = match http_client::parse_url(raw_uri) {
        Ok(url) => url,
        Err(UrlError::Scheme(scheme)) => {
            out.err(&note(&format!(
                "only http:// is emulated (no TLS), not {scheme}://"
            )))
            .await;
            return fail(
                format!("The '{scheme}' scheme is not supported by tandem's emulation."),
                "InvalidOperation",
                "NotSupportedException",
                "WebCmdletWebResponseException",
            )
            .await;
        }
        Err(UrlError::Malformed(_)) => {
            return fail(
                "Invalid URI: The hostname could not be parsed.".to_string(),
                "InvalidArgument",
                "UriFormatException",
                "System.UriFormatException",
            )
            .await;
        }
    };
    let method = bound
        .get("Method")
        .map(|m| Method::from_bytes(m.to_ascii_uppercase().as_bytes()).unwrap_or(Method::GET))
        .unwrap_or(Method::GET);
    let mut headers = Vec::new();
    if let Some(table) = bound.get("Headers") {
        match parse_hashtable(table) {
            Some(pairs) => headers.extend(pairs),
            None => {
                return fail(
                    format!("Cannot bind parameter 'Headers'. Cannot convert the \"{table}\" value of type \"System.String\" to type \"System.Collections.IDictionary\"."),
                    "InvalidArgument",
                    "ParameterBindingException",
                    "CannotConvertArgumentNoMessage",
                )
                .await;
            }
        }
    }
    let body = bound.get("Body").unwrap_or_default().to_string();
    if !body.is_empty()
        && !headers
            .iter()
            .any(|(k, _)| k.eq_ignore_ascii_case("content-type"))
    {
        let content_type = bound
            .get("ContentType")
            .unwrap_or("application/x-www-form-urlencoded");
        headers.push(("Content-Type".to_string(), content_type.to_string()));
    }
    let timeout = match bound.get("TimeoutSec").map(parse_seconds) {
        None => MAX_NET_TIMEOUT,
        Some(Some(d)) if d.is_zero() => MAX_NET_TIMEOUT,
        Some(Some(d)) => cap_timeout(d),
        Some(None) => {
            return fail(
                "Cannot bind parameter 'TimeoutSec'. Cannot convert value to type \"System.Int32\"."
                    .to_string(),
                "InvalidArgument",
                "ParameterBindingException",
                "CannotConvertArgumentNoMessage",
            )
            .await;
        }
    };
    let redirects = bound
        .get("MaximumRedirection")
        .and_then(|r| r.parse::<u32>().ok())
        .unwrap_or(DEFAULT_REDIRECTS);
    let verbose = bound.on("Verbose");
    if verbose {
        out.err(&format!(
            "VERBOSE: {} {} with {}-byte payload\n",
            method,
            url.to_display(),
            body.len()
        ))
        .await;
    }
    let request = Request {
        method,
        url,
        headers,
        body: Bytes::from(body),
        user_agent: bound
            .get("UserAgent")
            .map(str::to_string)
            .unwrap_or_else(|| web::powershell_user_agent(env)),
    };
    let how = Fetch {
        connect_timeout: timeout,
        max_time: timeout,
        max_redirects: redirects,
        verbose: None,
    };
    let response = match http_client::fetch(env, request, &how).await {
        Ok(response) => response,
        Err(e) => {
            return fail(
                fetch_message(&e),
                "InvalidOperation",
                "WebException",
                "WebCmdletWebResponseException",
            )
            .await;
        }
    };
    if verbose {
        let content_type = header(&response, "content-type");
        out.err(&format!(
            "VERBOSE: received {}-byte response of content type {content_type}\n",
            response.body.len()
        ))
        .await;
    }
    let tolerated = response.status.is_success()
        || (response.status.is_redirection() && redirects == 0)
        || bound.on("SkipHttpErrorCheck");
    if !tolerated {
        let text = String::from_utf8_lossy(&response.body).trim().to_string();
        let message = if text.is_empty() {
            format!(
                "The remote server returned an error: ({}) {}.",
                response.status.as_u16(),
                http_client::reason(response.status)
            )
        } else {
            text
        };
        return fail(
            message,
            "InvalidOperation",
            "WebException",
            "WebCmdletWebResponseException",
        )
        .await;
    }
    if let Some(file) = bound.get("OutFile") {
        out.err(&note(&format!(
            "the pod has no filesystem: the {} bytes for {file} were discarded",
            response.body.len()
        )))
        .await;
        if !bound.on("PassThru") {
            return 0;
        }
    }
    if response.truncated {
        out.err(&note(&format!(
            "the body was cut at {} bytes",
            super::MAX_BODY_BYTES
        )))
        .await;
    }
    if rest {
        show_rest(out, &response, call.select).await;
    } else {
        let object = web_response_object(&response);
        powershell::emit(out, &[object], View::List, call.select).await;
    }
    0
}

/// The message Windows PowerShell 5.1 (.NET's WebException) gives for a failed request.
fn fetch_message(error: &FetchError) -> String {
    match error {
        FetchError::Resolve { host, .. } => {
            format!("The remote name could not be resolved: '{host}'")
        }
        FetchError::Connect { .. } => "Unable to connect to the remote server".to_string(),
        FetchError::ConnectTimeout { .. } | FetchError::Timeout { .. } => {
            "The operation has timed out.".to_string()
        }
        FetchError::EmptyReply => {
            "The underlying connection was closed: The connection was closed unexpectedly."
                .to_string()
        }
        FetchError::BadReply => {
            "The server committed a protocol violation. Section=ResponseStatusLine".to_string()
        }
        FetchError::Recv(_) => {
            "The underlying connection was closed: An unexpected error occurred on a receive."
                .to_string()
        }
        FetchError::TooManyRedirects(_) => "The maximum redirection count has been exceeded. To increase the number of redirections allowed, supply a higher value to the -MaximumRedirection parameter.".to_string(),
        FetchError::Url(_) | FetchError::BadRequest(_) => {
            "Invalid URI: The hostname could not be parsed.".to_string()
        }
    }
}

fn header(response: &Response, name: &str) -> String {
    response
        .headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string()
}

/// The BasicHtmlWebResponseObject `Invoke-WebRequest` returns.
fn web_response_object(response: &Response) -> PsObject {
    let content = String::from_utf8_lossy(&response.body).into_owned();
    let headers: Vec<String> = response
        .headers
        .iter()
        .map(|(k, v)| {
            format!(
                "[{}, {}]",
                http_client::title_case(k.as_str()),
                String::from_utf8_lossy(v.as_bytes())
            )
        })
        .collect();
    let raw = format!("{}{content}", http_client::head_text(response, false));
    let links = links(&content);
    PsObject::default()
        .with("StatusCode", response.status.as_u16().to_string())
        .with("StatusDescription", http_client::reason(response.status))
        .with("Content", content)
        .with("RawContent", raw)
        .with("Headers", powershell::collection(&headers))
        .with("Images", "{}")
        .with("InputFields", "{}")
        .with("Links", powershell::collection(&links))
        .with("RawContentLength", response.body.len().to_string())
}

/// `@{href=…}` for each `href="…"` in an HTML body, as `-UseBasicParsing` lists links.
fn links(content: &str) -> Vec<String> {
    let lower = content.to_ascii_lowercase();
    let mut links = Vec::new();
    let mut from = 0;
    while let Some(at) = lower[from..].find("href=\"") {
        let start = from + at + 6;
        let Some(len) = content[start..].find('"') else {
            break;
        };
        links.push(format!("@{{href={}}}", &content[start..start + len]));
        from = start + len;
    }
    links
}

/// `Invoke-RestMethod`'s output: JSON as objects, anything else as the text.
async fn show_rest(out: &Output, response: &Response, select: Option<&str>) {
    let text = String::from_utf8_lossy(&response.body).into_owned();
    let json = header(response, "content-type").contains("json")
        || text.trim_start().starts_with(['{', '[']);
    let parsed = if json {
        serde_json::from_str::<serde_json::Value>(&text).ok()
    } else {
        None
    };
    let Some(value) = parsed else {
        if select.is_none() {
            let mut text = text;
            if !text.ends_with('\n') {
                text.push('\n');
            }
            out.out(&text).await;
        }
        return;
    };
    let items: Vec<&serde_json::Value> = match &value {
        serde_json::Value::Array(items) => items.iter().collect(),
        other => vec![other],
    };
    let objects: Vec<PsObject> = items
        .iter()
        .filter_map(|item| match item {
            serde_json::Value::Object(map) => Some(PsObject {
                props: map
                    .iter()
                    .map(|(k, v)| (k.clone(), json_value(v)))
                    .collect(),
            }),
            _ => None,
        })
        .collect();
    if objects.is_empty() {
        if select.is_none() {
            let lines: Vec<String> = items.iter().map(|v| json_value(v)).collect();
            out.out(&format!("{}\n", lines.join("\n"))).await;
        }
        return;
    }
    let columns = objects.first().map(|o| o.props.len()).unwrap_or(0);
    let view = if columns <= 4 {
        View::Table(None)
    } else {
        View::List
    };
    powershell::emit(out, &objects, view, select).await;
}

/// A JSON value as PowerShell shows a property: `True`, `@{a=1; b=x}`, `{1, 2}`.
fn json_value(value: &serde_json::Value) -> String {
    match value {
        serde_json::Value::Null => String::new(),
        serde_json::Value::Bool(true) => "True".to_string(),
        serde_json::Value::Bool(false) => "False".to_string(),
        serde_json::Value::Number(n) => n.to_string(),
        serde_json::Value::String(s) => s.clone(),
        serde_json::Value::Array(items) => {
            powershell::collection(&items.iter().map(json_value).collect::<Vec<_>>())
        }
        serde_json::Value::Object(map) => format!(
            "@{{{}}}",
            map.iter()
                .map(|(k, v)| format!("{k}={}", json_value(v)))
                .collect::<Vec<_>>()
                .join("; ")
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_values_show_as_powershell_shows_them() {
        let value: serde_json::Value =
            serde_json::from_str(r#"{"a":true,"b":[1,2,3,4,5],"c":{"d":"x"},"e":null}"#)
                .expect("valid JSON");
        let shown: Vec<String> = value
            .as_object()
            .map(|m| m.values().map(json_value).collect())
            .unwrap_or_default();
        assert_eq!(shown, ["True", "{1, 2, 3, 4...}", "@{d=x}", ""]);
    }

    #[test]
    fn links_are_found_in_html() {
        assert_eq!(
            links(r#"<a HREF="/x">x</a><a href="http://y/">y</a>"#),
            ["@{href=/x}", "@{href=http://y/}"]
        );
    }
}
