//! Which commands exist on each personality, how a command line runs (the shells' `-c`, `/c`,
//! `-Command` and their statement separators), the line REPLs, and the "not emulated" answer.

use std::future::Future;
use std::pin::Pin;

use super::term::{Input, Line, Output, Term};
use super::words::{self, Joiner, Syntax};
use super::{Env, Os, dns_tools, info, label, note, ping, test_netconnection, web, web_cmdlets};

/// What runs a command: kubectl directly, or one of the emulated shells. It decides a few
/// names: in Windows PowerShell 5.1 `curl` is an alias of `Invoke-WebRequest`, in `cmd`
/// `echo` prints its arguments as one line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Interpreter {
    Direct,
    WindowsPowerShell,
    Pwsh,
    Cmd,
    Sh,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Command {
    Curl,
    Wget,
    WebRequest,
    RestMethod,
    Nslookup,
    ResolveDnsName,
    Ping,
    TestNetConnection,
    Ipconfig,
    GetNetIpAddress,
    Hostname,
    Ip,
    Ifconfig,
    Cat,
    Echo,
    WriteOutput,
    WriteHost,
    True,
    False,
    Sleep,
    StartSleep,
    PowerShell,
    Pwsh,
    Cmd,
    Sh,
    Exit,
}

/// The Linux personality's commands, by exact name.
const LINUX: &[(&str, Command)] = &[
    ("curl", Command::Curl),
    ("wget", Command::Wget),
    ("nslookup", Command::Nslookup),
    ("ping", Command::Ping),
    ("hostname", Command::Hostname),
    ("ip", Command::Ip),
    ("ifconfig", Command::Ifconfig),
    ("cat", Command::Cat),
    ("echo", Command::Echo),
    ("true", Command::True),
    ("false", Command::False),
    ("sleep", Command::Sleep),
    ("sh", Command::Sh),
    ("bash", Command::Sh),
    ("ash", Command::Sh),
    ("exit", Command::Exit),
];

/// The Windows personality's commands, by case-insensitive name (`.exe` optional).
const WINDOWS: &[(&str, Command)] = &[
    ("curl", Command::Curl),
    ("invoke-webrequest", Command::WebRequest),
    ("iwr", Command::WebRequest),
    ("wget", Command::WebRequest),
    ("invoke-restmethod", Command::RestMethod),
    ("irm", Command::RestMethod),
    ("resolve-dnsname", Command::ResolveDnsName),
    ("nslookup", Command::Nslookup),
    ("ping", Command::Ping),
    ("test-netconnection", Command::TestNetConnection),
    ("tnc", Command::TestNetConnection),
    ("ipconfig", Command::Ipconfig),
    ("get-netipaddress", Command::GetNetIpAddress),
    ("hostname", Command::Hostname),
    ("echo", Command::WriteOutput),
    ("write", Command::WriteOutput),
    ("write-output", Command::WriteOutput),
    ("write-host", Command::WriteHost),
    ("start-sleep", Command::StartSleep),
    ("sleep", Command::StartSleep),
    ("powershell", Command::PowerShell),
    ("pwsh", Command::Pwsh),
    ("cmd", Command::Cmd),
    ("exit", Command::Exit),
];

/// What the "not emulated" message lists.
const LINUX_LIST: &str = "curl, wget, nslookup, ping, hostname, ip, ifconfig, cat (/etc/resolv.conf, /etc/hosts, /etc/hostname), echo, true, false, sleep, sh/bash -c";
const WINDOWS_LIST: &str = "curl.exe, Invoke-WebRequest (iwr), Invoke-RestMethod (irm), Resolve-DnsName, nslookup, ping, Test-NetConnection (tnc), ipconfig, Get-NetIPAddress, hostname, echo/Write-Output, Write-Host, Start-Sleep, powershell/pwsh -Command, cmd /c";

/// Exit code for a command that is not emulated: the shell's "not found" on Linux, what
/// `powershell -Command` returns on Windows.
pub(super) fn not_emulated_code(os: Os) -> i32 {
    match os {
        Os::Linux => 127,
        Os::Windows => 1,
    }
}

fn lookup(os: Os, shell: Interpreter, typed: &str) -> Option<Command> {
    let base = typed.rsplit(['/', '\\']).next().unwrap_or(typed);
    match os {
        Os::Linux => LINUX.iter().find(|(n, _)| *n == base).map(|(_, c)| *c),
        Os::Windows => {
            let lower = base.to_ascii_lowercase();
            let name = lower.strip_suffix(".exe").unwrap_or(&lower);
            let plain_curl = lower == "curl";
            let command = WINDOWS.iter().find(|(n, _)| *n == name).map(|(_, c)| *c)?;
            Some(match (shell, command) {
                (Interpreter::WindowsPowerShell, Command::Curl) if plain_curl => {
                    Command::WebRequest
                }
                (Interpreter::Cmd, Command::WriteOutput) if name == "echo" => Command::Echo,
                _ => command,
            })
        }
    }
}

/// The answer for a command tandem does not emulate.
async fn not_emulated(env: &Env<'_>, out: &Output, typed: &str) {
    let (list, code) = match env.os {
        Os::Linux => (LINUX_LIST, 127),
        Os::Windows => (WINDOWS_LIST, 1),
    };
    out.err(&format!(
        "tandem: {typed:?} is not emulated (exit {code}): pod {}/{} runs on an emulated node, where no process runs.\nEmulated commands: {list}\n",
        env.ctx.namespace, env.ctx.pod
    ))
    .await;
}

/// One command as the shells run it.
pub(super) struct Call<'a> {
    /// The arguments after the command name.
    pub(super) args: &'a [String],
    /// The statement as written, for PowerShell's error records.
    pub(super) text: &'a str,
    /// PowerShell's `(…).Property` / `Select-Object -ExpandProperty`.
    pub(super) select: Option<&'a str>,
}

/// A run in progress: the pod, and the exec streams.
struct Session<'e, 'c> {
    env: &'e Env<'c>,
    out: Output,
    input: Input,
}

/// Whether to go on after a statement.
enum Flow {
    Next(i32),
    Exit(i32),
}

type Boxed<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Runs kubectl's argv: the label, then the command; or the "not emulated" answer.
pub(super) async fn run_top(env: &Env<'_>, argv: Vec<String>, term: Term) -> i32 {
    let Term { out, input } = term;
    let mut session = Session { env, out, input };
    let Some(first) = argv.first() else {
        session.out.err("tandem: no command given\n").await;
        return not_emulated_code(env.os);
    };
    let Some(command) = lookup(env.os, Interpreter::Direct, first) else {
        not_emulated(env, &session.out, first).await;
        return not_emulated_code(env.os);
    };
    session
        .out
        .err(&label(first.rsplit(['/', '\\']).next().unwrap_or(first)))
        .await;
    let text = join_argv(&argv);
    let call = Call {
        args: &argv[1..],
        text: &text,
        select: None,
    };
    match run_command(&mut session, command, Interpreter::Direct, &call, 0).await {
        Flow::Next(code) | Flow::Exit(code) => code,
    }
}

/// `argv` as one line, quoting words with spaces.
fn join_argv(argv: &[String]) -> String {
    argv.iter()
        .map(|a| {
            if a.is_empty() || a.contains([' ', '\t']) {
                format!("\"{a}\"")
            } else {
                a.clone()
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn run_command<'a>(
    s: &'a mut Session<'_, '_>,
    command: Command,
    shell: Interpreter,
    call: &'a Call<'a>,
    last: i32,
) -> Boxed<'a, Flow> {
    Box::pin(async move {
        let env = s.env;
        let out = &s.out;
        let args = call.args;
        let code = match command {
            Command::Curl => web::curl(env, out, args).await,
            Command::Wget => web::wget(env, out, args).await,
            Command::WebRequest => web_cmdlets::invoke(env, out, call, false).await,
            Command::RestMethod => web_cmdlets::invoke(env, out, call, true).await,
            Command::Nslookup => dns_tools::nslookup(env, out, args).await,
            Command::ResolveDnsName => dns_tools::resolve_dns_name(env, out, call).await,
            Command::Ping => ping::ping(env, out, &mut s.input, args).await,
            Command::TestNetConnection => test_netconnection::run(env, out, call).await,
            Command::Ipconfig => info::ipconfig(env, out, args).await,
            Command::GetNetIpAddress => info::get_net_ip_address(env, out, call).await,
            Command::Hostname => info::hostname(env, out, args).await,
            Command::Ip => info::ip(env, out, args).await,
            Command::Ifconfig => info::ifconfig(env, out, args).await,
            Command::Cat => info::cat(env, out, args).await,
            Command::Echo => info::echo(env, out, args).await,
            Command::WriteOutput => info::write_output(out, call).await,
            Command::WriteHost => info::write_host(out, args).await,
            Command::True => 0,
            Command::False => 1,
            Command::Sleep => info::sleep(out, &mut s.input, args).await,
            Command::StartSleep => info::start_sleep(out, &mut s.input, call).await,
            Command::PowerShell => powershell(s, args, Interpreter::WindowsPowerShell).await,
            Command::Pwsh => powershell(s, args, Interpreter::Pwsh).await,
            Command::Cmd => cmd(s, args).await,
            Command::Sh => sh(s, args).await,
            Command::Exit => {
                let code = match args.first() {
                    Some(a) => a.parse::<i32>().unwrap_or(match shell {
                        Interpreter::Sh => 2,
                        _ => 0,
                    }),
                    None => last,
                };
                return Flow::Exit(code);
            }
        };
        Flow::Next(code)
    })
}

/// Runs a line of statements in `shell`; `last` is the status before it.
fn run_line<'a>(
    s: &'a mut Session<'_, '_>,
    shell: Interpreter,
    line: &'a str,
    last: i32,
) -> Boxed<'a, Flow> {
    Box::pin(async move {
        let syntax = syntax_of(shell);
        let statements = match words::split(syntax, line) {
            Ok(statements) => statements,
            Err(e) => {
                let (name, code) = match shell {
                    Interpreter::Cmd => ("cmd", 1),
                    Interpreter::Sh | Interpreter::Direct => ("sh", 2),
                    Interpreter::WindowsPowerShell | Interpreter::Pwsh => ("powershell", 1),
                };
                s.out.err(&format!("{name}: {e}\n")).await;
                return Flow::Next(code);
            }
        };
        let mut status = last;
        for statement in &statements {
            let run = match statement.joiner {
                Joiner::Always => true,
                Joiner::IfSucceeded => status == 0,
                Joiner::IfFailed => status != 0,
            };
            if !run {
                continue;
            }
            let Some((name, args)) = statement.argv.split_first() else {
                continue;
            };
            let Some(command) = lookup(s.env.os, shell, name) else {
                not_emulated(s.env, &s.out, name).await;
                status = not_emulated_code(s.env.os);
                continue;
            };
            let call = Call {
                args,
                text: &statement.text,
                select: statement.select.as_deref(),
            };
            match run_command(s, command, shell, &call, status).await {
                Flow::Next(code) => status = code,
                Flow::Exit(code) => return Flow::Exit(code),
            }
        }
        Flow::Next(status)
    })
}

fn syntax_of(shell: Interpreter) -> Syntax {
    match shell {
        Interpreter::WindowsPowerShell | Interpreter::Pwsh => Syntax::PowerShell,
        Interpreter::Cmd => Syntax::Cmd,
        Interpreter::Sh | Interpreter::Direct => Syntax::Sh,
    }
}

/// Reads lines from stdin and runs each until `exit` or the end of input.
async fn repl(s: &mut Session<'_, '_>, shell: Interpreter, prompt: &str, mut status: i32) -> i32 {
    loop {
        s.out.out(prompt).await;
        let line = s.input.read_line(&s.out).await;
        match line {
            Line::Text(line) => match run_line(s, shell, &line, status).await {
                Flow::Next(code) => status = code,
                Flow::Exit(code) => return code,
            },
            Line::Interrupt => {}
            Line::Eof => return status,
        }
    }
}

/// Without a command and without stdin, a shell has nothing to do.
async fn nothing_to_run(out: &Output, shell: &str) -> i32 {
    out.err(&note(&format!(
        "{shell} got no command and no stdin; use `kubectl exec -it … -- {shell}` for a prompt"
    )))
    .await;
    0
}

/// `powershell`/`pwsh`: `-Command …` (the rest of the line), a first non-option word (the rest
/// as a command), `-Command -` (stdin without prompts), or the REPL.
async fn powershell(s: &mut Session<'_, '_>, args: &[String], shell: Interpreter) -> i32 {
    const WITH_VALUE: [&str; 8] = [
        "-executionpolicy",
        "-ep",
        "-ex",
        "-inputformat",
        "-outputformat",
        "-windowstyle",
        "-configurationname",
        "-workingdirectory",
    ];
    const FLAGS: [&str; 10] = [
        "-noprofile",
        "-nop",
        "-noninteractive",
        "-noni",
        "-nologo",
        "-nol",
        "-sta",
        "-mta",
        "-noexit",
        "-login",
    ];
    let name = if shell == Interpreter::Pwsh {
        "pwsh"
    } else {
        "powershell"
    };
    let mut rest = args.iter().enumerate();
    let mut command: Option<String> = None;
    while let Some((i, arg)) = rest.next() {
        let lower = arg.to_ascii_lowercase();
        if WITH_VALUE.contains(&lower.as_str()) {
            rest.next();
        } else if FLAGS.contains(&lower.as_str()) {
        } else if matches!(
            lower.as_str(),
            "-command" | "-c" | "-com" | "-comm" | "-comma"
        ) {
            command = Some(args[i + 1..].join(" "));
            break;
        } else if matches!(
            lower.as_str(),
            "-file" | "-f" | "-encodedcommand" | "-enc" | "-e" | "-ec"
        ) {
            s.out
                .err(&format!(
                    "{name}: {arg} is not emulated: the pod has no filesystem and tandem runs only -Command text\n"
                ))
                .await;
            return 1;
        } else {
            command = Some(args[i..].join(" "));
            break;
        }
    }
    match command.as_deref() {
        Some("-") => repl(s, shell, "", 0).await,
        Some(text) => match run_line(s, shell, text, 0).await {
            Flow::Next(code) | Flow::Exit(code) => code,
        },
        None if s.input.attached() => {
            s.out
                .out("Emulated PowerShell prompt (tandem): a few networking commands, no process runs.\n\n")
                .await;
            repl(s, shell, "PS C:\\> ", 0).await
        }
        None => nothing_to_run(&s.out, name).await,
    }
}

/// `cmd /c …`, `cmd /k …` (then the REPL), or the REPL.
async fn cmd(s: &mut Session<'_, '_>, args: &[String]) -> i32 {
    let mut command: Option<(String, bool)> = None;
    for (i, arg) in args.iter().enumerate() {
        let lower = arg.to_ascii_lowercase();
        match lower.as_str() {
            "/c" | "/k" | "/r" => {
                command = Some((args[i + 1..].join(" "), lower == "/k"));
                break;
            }
            "/q" | "/d" | "/a" | "/u" | "/s" | "/e:on" | "/e:off" | "/v:on" | "/v:off" => {}
            _ => {
                command = Some((args[i..].join(" "), true));
                break;
            }
        }
    }
    let banner = format!(
        "Emulated cmd prompt (tandem) on Windows build {}: a few networking commands, no process runs.\n\n",
        s.env.windows_build()
    );
    let mut status = 0;
    if let Some((text, keep)) = &command {
        match run_line(s, Interpreter::Cmd, text, 0).await {
            Flow::Next(code) => status = code,
            Flow::Exit(code) => return code,
        }
        if !keep {
            return status;
        }
    }
    if !s.input.attached() {
        return match command {
            Some(_) => status,
            None => nothing_to_run(&s.out, "cmd").await,
        };
    }
    if command.is_none() {
        s.out.out(&banner).await;
    }
    repl(s, Interpreter::Cmd, "C:\\>", status).await
}

/// `sh -c '…'` (extra operands are `$0…`, ignored), or the REPL.
async fn sh(s: &mut Session<'_, '_>, args: &[String]) -> i32 {
    let mut rest = args.iter();
    while let Some(arg) = rest.next() {
        if arg == "--" {
            continue;
        }
        if let Some(flags) = arg.strip_prefix('-').filter(|f| !f.is_empty()) {
            if flags.contains('c') {
                let Some(text) = rest.next() else {
                    s.out.err("sh: -c requires an argument\n").await;
                    return 2;
                };
                return match run_line(s, Interpreter::Sh, text, 0).await {
                    Flow::Next(code) | Flow::Exit(code) => code,
                };
            }
            continue;
        }
        s.out
            .err(&format!(
                "sh: {arg}: not emulated: the pod has no filesystem; use sh -c '…'\n"
            ))
            .await;
        return 127;
    }
    if s.input.attached() {
        repl(s, Interpreter::Sh, "/ # ", 0).await
    } else {
        nothing_to_run(&s.out, "sh").await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_names_ignore_case_paths_and_exe() {
        assert_eq!(
            lookup(
                Os::Windows,
                Interpreter::Direct,
                "C:\\Windows\\System32\\PING.EXE"
            ),
            Some(Command::Ping)
        );
        assert_eq!(
            lookup(Os::Windows, Interpreter::Direct, "resolve-dnsname"),
            Some(Command::ResolveDnsName)
        );
        assert_eq!(
            lookup(Os::Windows, Interpreter::Direct, "Ping"),
            Some(Command::Ping)
        );
    }

    #[test]
    fn curl_is_invoke_webrequest_only_inside_windows_powershell() {
        assert_eq!(
            lookup(Os::Windows, Interpreter::Direct, "curl"),
            Some(Command::Curl)
        );
        assert_eq!(
            lookup(Os::Windows, Interpreter::WindowsPowerShell, "curl"),
            Some(Command::WebRequest)
        );
        assert_eq!(
            lookup(Os::Windows, Interpreter::WindowsPowerShell, "curl.exe"),
            Some(Command::Curl)
        );
        assert_eq!(
            lookup(Os::Windows, Interpreter::Pwsh, "curl"),
            Some(Command::Curl)
        );
    }

    #[test]
    fn linux_names_are_exact() {
        assert_eq!(
            lookup(Os::Linux, Interpreter::Direct, "/bin/sh"),
            Some(Command::Sh)
        );
        assert_eq!(lookup(Os::Linux, Interpreter::Direct, "Curl"), None);
        assert_eq!(lookup(Os::Linux, Interpreter::Direct, "ipconfig"), None);
    }
}
