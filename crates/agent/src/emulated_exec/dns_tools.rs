//! `nslookup` (BIND's on Linux, Windows' own on Windows) and `Resolve-DnsName`, each in its
//! familiar format, over [`resolver`] with the pod's search rules.

use std::net::{IpAddr, SocketAddr};
use std::str::FromStr;

use hickory_proto::op::{Message, ResponseCode};
use hickory_proto::rr::{Name, RData, Record, RecordType};

use super::powershell::{self, ErrorRecord, Param, PsObject, View, switch, value};
use super::resolver::{self, DnsError, Outcome, resolve_host, reverse_name};
use super::shell::Call;
use super::term::Output;
use super::{Env, Os};

/// nslookup's command line.
struct NslookupArgs {
    name: String,
    server: Option<String>,
    qtype: RecordType,
    port: Option<u16>,
}

fn parse_nslookup(args: &[String]) -> Result<NslookupArgs, String> {
    let mut positional = Vec::new();
    let mut qtype = RecordType::A;
    let mut port = None;
    for arg in args {
        let Some(option) = arg.strip_prefix('-').filter(|o| !o.is_empty()) else {
            positional.push(arg.clone());
            continue;
        };
        let (key, val) = option.split_once('=').unwrap_or((option, ""));
        match key.to_ascii_lowercase().as_str() {
            "type" | "query" | "querytype" | "q" | "t" => {
                qtype = RecordType::from_str(&val.to_ascii_uppercase())
                    .map_err(|_| format!("unknown query type: {val}"))?;
            }
            "port" => port = Some(val.parse().map_err(|_| format!("invalid port: {val}"))?),
            "timeout" | "retry" | "debug" | "nodebug" | "recurse" | "norecurse" | "search"
            | "nosearch" | "vc" | "novc" | "fail" | "nofail" => {}
            _ => return Err(format!("*** Invalid option: {option}")),
        }
    }
    let mut positional = positional.into_iter();
    let name = positional
        .next()
        .ok_or("interactive mode is not emulated; give a name: nslookup NAME [SERVER]")?;
    Ok(NslookupArgs {
        name,
        server: positional.next(),
        qtype,
        port,
    })
}

/// The server to ask: `SERVER` (an address or a name resolved the pod's way) or the pod's.
async fn server_for(
    env: &Env<'_>,
    given: Option<&str>,
    port: Option<u16>,
) -> Result<Vec<SocketAddr>, String> {
    let port = port.unwrap_or(env.dns_port);
    match given {
        None => {
            let servers: Vec<SocketAddr> = resolver::servers(env)
                .into_iter()
                .map(|s| SocketAddr::new(s.ip(), port))
                .collect();
            if servers.is_empty() {
                return Err("no nameserver is configured in the pod".to_string());
            }
            Ok(servers)
        }
        Some(server) => match resolve_host(env, server).await {
            Ok(found) => Ok(found
                .addrs
                .into_iter()
                .map(|ip| SocketAddr::new(ip, port))
                .collect()),
            Err(_) => Err(format!("couldn't get address for '{server}': not found")),
        },
    }
}

/// `nslookup NAME [SERVER]`: 0 when found, 1 otherwise.
pub(super) async fn nslookup(env: &Env<'_>, out: &Output, args: &[String]) -> i32 {
    let parsed = match parse_nslookup(args) {
        Ok(parsed) => parsed,
        Err(e) => {
            out.err(&format!("nslookup: {e}\n")).await;
            return 1;
        }
    };
    let servers = match server_for(env, parsed.server.as_deref(), parsed.port).await {
        Ok(servers) => servers,
        Err(e) => {
            out.err(&format!("nslookup: {e}\n")).await;
            return 1;
        }
    };
    match env.os {
        Os::Linux => nslookup_linux(env, out, &parsed, servers).await,
        Os::Windows => nslookup_windows(env, out, &parsed, servers).await,
    }
}

fn plain(name: &Name) -> String {
    name.to_string().trim_end_matches('.').to_string()
}

/// BIND 9's nslookup.
async fn nslookup_linux(
    env: &Env<'_>,
    out: &Output,
    args: &NslookupArgs,
    servers: Vec<SocketAddr>,
) -> i32 {
    let Some(&first) = servers.first() else {
        return 1;
    };
    let header = format!(
        "Server:\t\t{}\nAddress:\t{}#{}\n\n",
        first.ip(),
        first.ip(),
        first.port()
    );
    let outcome = resolver::search(env, &args.name, args.qtype, Some(servers)).await;
    match outcome {
        Ok(Outcome::Found { reply, server, .. }) => {
            let mut text = format!(
                "Server:\t\t{}\nAddress:\t{}#{}\n\n",
                server.ip(),
                server.ip(),
                server.port()
            );
            if !reply.metadata.authoritative {
                text.push_str("Non-authoritative answer:\n");
            }
            for record in &reply.answers {
                let owner = plain(&record.name);
                text.push_str(&match &record.data {
                    RData::A(a) => format!("Name:\t{owner}\nAddress: {}\n", a.0),
                    RData::AAAA(a) => format!("Name:\t{owner}\nAddress: {}\n", a.0),
                    RData::CNAME(c) => format!("{owner}\tcanonical name = {}\n", c.0),
                    RData::PTR(p) => format!("{owner}\tname = {}\n", p.0),
                    RData::SRV(s) => format!(
                        "{owner}\tservice = {} {} {} {}\n",
                        s.priority, s.weight, s.port, s.target
                    ),
                    other => format!(
                        "{owner}\t{} = {other}\n",
                        record.record_type().to_string().to_ascii_lowercase()
                    ),
                });
            }
            text.push('\n');
            out.out(&text).await;
            0
        }
        Ok(Outcome::NotFound { code, .. }) => {
            let line = match code {
                ResponseCode::NoError => format!("*** Can't find {}: No answer\n", args.name),
                ResponseCode::NXDomain => format!("** server can't find {}: NXDOMAIN\n", args.name),
                other => format!(
                    "** server can't find {}: {}\n",
                    args.name,
                    other.to_string().to_ascii_uppercase().replace(' ', "")
                ),
            };
            out.out(&format!("{header}{line}\n")).await;
            1
        }
        Err(DnsError::BadName(_)) => {
            out.out(&header).await;
            out.err(&format!("nslookup: '{}' is not a legal name\n", args.name))
                .await;
            1
        }
        Err(_) => {
            out.out(";; connection timed out; no servers could be reached\n\n")
                .await;
            1
        }
    }
}

/// What Windows nslookup calls the server: its PTR name, or `UnKnown`.
async fn server_name(env: &Env<'_>, server: SocketAddr) -> String {
    let Ok(name) = Name::from_ascii(reverse_name(server.ip())) else {
        return "UnKnown".to_string();
    };
    match resolver::query(env, server, &name, RecordType::PTR, 1).await {
        Ok(reply) => reply
            .answers
            .iter()
            .find_map(|r| match &r.data {
                RData::PTR(p) => Some(plain(&p.0)),
                _ => None,
            })
            .unwrap_or_else(|| "UnKnown".to_string()),
        Err(_) => "UnKnown".to_string(),
    }
}

/// Windows' nslookup.
async fn nslookup_windows(
    env: &Env<'_>,
    out: &Output,
    args: &NslookupArgs,
    servers: Vec<SocketAddr>,
) -> i32 {
    let Some(&first) = servers.first() else {
        return 1;
    };
    let name = server_name(env, first).await;
    out.out(&format!("Server:  {name}\nAddress:  {}\n\n", first.ip()))
        .await;
    let outcome = resolver::search(env, &args.name, args.qtype, Some(servers)).await;
    match outcome {
        Ok(Outcome::Found { reply, .. }) => {
            if !reply.metadata.authoritative {
                out.err("Non-authoritative answer:\n").await;
            }
            out.out(&windows_answer(&args.name, &reply)).await;
            0
        }
        Ok(Outcome::NotFound { code, .. }) => {
            let line = match code {
                ResponseCode::NoError => format!(
                    "*** No internal type for both IPv4 and IPv6 Addresses (A+AAAA) records available for {}\n",
                    args.name
                ),
                ResponseCode::NXDomain => {
                    format!("*** {name} can't find {}: Non-existent domain\n", args.name)
                }
                ResponseCode::ServFail => {
                    format!("*** {name} can't find {}: Server failed\n", args.name)
                }
                other => format!("*** {name} can't find {}: {other}\n", args.name),
            };
            out.err(&line).await;
            1
        }
        Err(_) => {
            out.err(&format!(
                "DNS request timed out.\n    timeout was {} seconds.\n*** Request to {name} timed-out\n",
                resolver::ATTEMPT_TIMEOUT.as_secs()
            ))
            .await;
            1
        }
    }
}

/// Windows nslookup's answer block: `Name:`, `Address:`/`Addresses:`, `Aliases:`.
fn windows_answer(asked: &str, reply: &Message) -> String {
    let mut addresses: Vec<String> = Vec::new();
    let mut owner = None;
    let mut aliases: Vec<String> = Vec::new();
    let mut other = String::new();
    for record in &reply.answers {
        match &record.data {
            RData::A(a) => {
                owner.get_or_insert_with(|| plain(&record.name));
                addresses.push(a.0.to_string());
            }
            RData::AAAA(a) => {
                owner.get_or_insert_with(|| plain(&record.name));
                addresses.push(a.0.to_string());
            }
            RData::CNAME(_) => aliases.push(plain(&record.name)),
            data => other.push_str(&format!(
                "{}\t{} = {data}\n",
                plain(&record.name),
                record.record_type().to_string().to_ascii_lowercase()
            )),
        }
    }
    let mut text = other;
    if let Some(owner) = owner {
        text.push_str(&format!("Name:    {owner}\n"));
        match addresses.as_slice() {
            [one] => text.push_str(&format!("Address:  {one}\n")),
            many => {
                text.push_str(&format!("Addresses:  {}\n", many.join("\n\t  ")));
            }
        }
        if !aliases.is_empty() {
            text.push_str(&format!("Aliases:  {}\n", aliases.join("\n\t  ")));
        }
    } else if text.is_empty() {
        text.push_str(&format!("Name:    {asked}\n"));
    }
    text.push('\n');
    text
}

const RESOLVE_PARAMS: [Param; 12] = [
    value("Name", &[]),
    value("Type", &[]),
    value("Server", &[]),
    switch("DnsOnly", &[]),
    switch("NoHostsFile", &[]),
    switch("QuickTimeout", &[]),
    switch("CacheOnly", &[]),
    switch("TcpOnly", &[]),
    switch("NoRecursion", &[]),
    switch("DnssecOk", &[]),
    switch("NoIdn", &[]),
    switch("LlmnrNetbiosOnly", &[]),
];

const RESOLVE_FULL_NAME: &str = "Microsoft.DnsClient.Commands.ResolveDnsName";

/// `Resolve-DnsName [-Name] N [[-Type] T] [-Server S]`: the records as PowerShell tables, or
/// PowerShell's error record (exit 1).
pub(super) async fn resolve_dns_name(env: &Env<'_>, out: &Output, call: &Call<'_>) -> i32 {
    let bound = match powershell::bind(call.args, &RESOLVE_PARAMS) {
        Ok(bound) => bound,
        Err(e) => {
            out.err(&powershell::bind_error(
                call.text,
                "Resolve-DnsName",
                RESOLVE_FULL_NAME,
                &e,
            ))
            .await;
            return 1;
        }
    };
    let fail = |name: &str, message: &str, category: &str, reason: &str, id: &str| {
        powershell::error_record(
            call.text,
            &ErrorRecord {
                command: "Resolve-DnsName",
                message: &format!("{name} : {message}"),
                category,
                target: &format!("{name}:String"),
                reason,
                error_id: &format!("{id},{RESOLVE_FULL_NAME}"),
            },
        )
    };
    let Some(name) = bound.get_or_positional("Name", 0).map(str::to_string) else {
        out.err(&fail(
            "",
            "Cannot process command because of one or more missing mandatory parameters: Name.",
            "InvalidArgument",
            "ParameterBindingException",
            "MissingMandatoryParameter",
        ))
        .await;
        return 1;
    };
    let type_text = bound.get_or_positional("Type", 1).unwrap_or("A");
    let type_upper = type_text.to_ascii_uppercase();
    let qtype = match type_upper.as_str() {
        "A_AAAA" => Ok(RecordType::A),
        "ALL" => Ok(RecordType::ANY),
        other => RecordType::from_str(other),
    };
    let Ok(mut qtype) = qtype else {
        out.err(&fail(
            &name,
            &format!("Cannot bind parameter 'Type'. Cannot convert value \"{type_text}\" to type \"Microsoft.DnsClient.Commands.RecordType\"."),
            "InvalidArgument",
            "ParameterBindingException",
            "CannotConvertArgumentNoMessage",
        ))
        .await;
        return 1;
    };
    let mut query_name = name.clone();
    if let Ok(ip) = name.parse::<IpAddr>() {
        query_name = reverse_name(ip);
        qtype = RecordType::PTR;
    }
    let servers = match bound.get("Server") {
        Some(server) => match server_for(env, Some(server), None).await {
            Ok(servers) => Some(servers),
            Err(_) => {
                out.err(&fail(
                    &name,
                    "DNS server not found",
                    "ResourceUnavailable",
                    "Win32Exception",
                    "DNS_ERROR_SERVER_NOT_FOUND",
                ))
                .await;
                return 1;
            }
        },
        None => None,
    };
    match resolver::search(env, &query_name, qtype, servers).await {
        Ok(Outcome::Found { reply, .. }) => {
            show_records(out, &reply.answers, "Answer", call.select).await;
            0
        }
        Ok(Outcome::NotFound { code, reply, .. }) => {
            let (message, id) = match code {
                ResponseCode::NoError => {
                    let authority = reply.map(|r| r.authorities).unwrap_or_default();
                    show_records(out, &authority, "Authority", call.select).await;
                    return 0;
                }
                ResponseCode::NXDomain => ("DNS name does not exist", "DNS_ERROR_RCODE_NAME_ERROR"),
                ResponseCode::ServFail => ("DNS server failure", "DNS_ERROR_RCODE_SERVER_FAILURE"),
                ResponseCode::Refused => ("DNS request refused", "DNS_ERROR_RCODE_REFUSED"),
                _ => ("DNS query failed", "DNS_ERROR_RCODE"),
            };
            out.err(&fail(
                &name,
                message,
                "ResourceUnavailable",
                "Win32Exception",
                id,
            ))
            .await;
            1
        }
        Err(DnsError::BadName(_)) => {
            out.err(&fail(
                &name,
                "DNS name contains an invalid character",
                "InvalidArgument",
                "Win32Exception",
                "DNS_ERROR_INVALID_NAME_CHAR",
            ))
            .await;
            1
        }
        Err(_) => {
            out.err(&fail(
                &name,
                "This operation returned because the timeout period expired",
                "OperationTimeout",
                "Win32Exception",
                "ERROR_TIMEOUT",
            ))
            .await;
            1
        }
    }
}

/// Resolve-DnsName's views: records grouped by the columns their type shows, one table each.
async fn show_records(out: &Output, records: &[Record], section: &str, select: Option<&str>) {
    let mut groups: Vec<(&'static [&'static str], Vec<PsObject>)> = Vec::new();
    for record in records {
        let (columns, object) = record_object(record, section);
        match groups.iter_mut().find(|(c, _)| *c == columns) {
            Some((_, objects)) => objects.push(object),
            None => groups.push((columns, vec![object])),
        }
    }
    if select.is_some() {
        let all: Vec<PsObject> = groups.into_iter().flat_map(|(_, o)| o).collect();
        powershell::emit(out, &all, View::List, select).await;
        return;
    }
    for (columns, objects) in &groups {
        powershell::emit(out, objects, View::Table(Some(columns)), None).await;
    }
}

fn record_object(record: &Record, section: &str) -> (&'static [&'static str], PsObject) {
    const ADDRESS: &[&str] = &["Name", "Type", "TTL", "Section", "IPAddress"];
    const NAME_HOST: &[&str] = &["Name", "Type", "TTL", "Section", "NameHost"];
    const SRV: &[&str] = &[
        "Name",
        "Type",
        "TTL",
        "Section",
        "NameTarget",
        "Priority",
        "Weight",
        "Port",
    ];
    const SOA: &[&str] = &[
        "Name",
        "Type",
        "TTL",
        "Section",
        "PrimaryServer",
        "NameAdministrator",
        "SerialNumber",
    ];
    const OTHER: &[&str] = &["Name", "Type", "TTL", "Section", "Strings"];
    let base = PsObject::default()
        .with("Name", plain(&record.name))
        .with("Type", record.record_type().to_string())
        .with("TTL", record.ttl.to_string())
        .with("Section", section);
    match &record.data {
        RData::A(a) => (
            ADDRESS,
            base.with("IPAddress", a.0.to_string())
                .with("IP4Address", a.0.to_string()),
        ),
        RData::AAAA(a) => (
            ADDRESS,
            base.with("IPAddress", a.0.to_string())
                .with("IP6Address", a.0.to_string()),
        ),
        RData::CNAME(c) => (NAME_HOST, base.with("NameHost", plain(&c.0))),
        RData::PTR(p) => (NAME_HOST, base.with("NameHost", plain(&p.0))),
        RData::NS(n) => (NAME_HOST, base.with("NameHost", plain(&n.0))),
        RData::SRV(s) => (
            SRV,
            base.with("NameTarget", plain(&s.target))
                .with("Priority", s.priority.to_string())
                .with("Weight", s.weight.to_string())
                .with("Port", s.port.to_string()),
        ),
        RData::SOA(s) => (
            SOA,
            base.with("PrimaryServer", plain(&s.mname))
                .with("NameAdministrator", plain(&s.rname))
                .with("SerialNumber", s.serial.to_string()),
        ),
        RData::TXT(t) => {
            let strings: Vec<String> = t
                .txt_data
                .iter()
                .map(|s| String::from_utf8_lossy(s).into_owned())
                .collect();
            (
                OTHER,
                base.with("Strings", powershell::collection(&strings)),
            )
        }
        other => (OTHER, base.with("Strings", other.to_string())),
    }
}
