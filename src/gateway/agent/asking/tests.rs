//! The asker's tests: questions on a call's own stream and on the lines of stdio, their
//! answers, withdrawals and timeouts.

use super::*;
use futures::StreamExt;

fn eliciting() -> Option<ClientCapabilities> {
    serde_json::from_value(serde_json::json!({"elicitation": {}})).ok()
}

#[tokio::test]
async fn a_question_goes_on_the_stream_and_its_answer_comes_back_by_session_and_id() {
    let questions = Arc::new(Questions::default());
    let (stream, mut lines) = RequestStream::new();
    let asker = asker_on(&questions, stream, CancellationToken::new());
    let asked = asker.ask(
        "elicitation/create",
        serde_json::json!({"message": "m"}),
        Duration::from_secs(5),
    );
    let answer = async {
        let line = lines.next().await.expect("the question");
        let q: Value = serde_json::from_slice(&line).unwrap();
        assert_eq!(q["method"], "elicitation/create");
        let id = q["id"].as_str().unwrap().to_string();
        // Another session's answer, or an id Palisade did not give, is not taken.
        assert!(!questions.answer("s2", &id, Answered::Result(raw("null"))));
        assert!(!questions.answer("s1", "7", Answered::Result(raw("null"))));
        let ok = raw(r#"{"action":"accept","n":1e3}"#);
        assert!(questions.answer("s1", &id, Answered::Result(ok)));
    };
    let (got, ()) = tokio::join!(asked, answer);
    // As the agent wrote it: `1e3` not re-spelt.
    assert_eq!(got.unwrap().get(), r#"{"action":"accept","n":1e3}"#);
    assert_eq!(questions.waiting(), 0);
}

fn raw(text: &str) -> Box<RawValue> {
    RawValue::from_string(text.to_string()).unwrap()
}

/// An asker for session `s1` on `stream`, ending with `call`.
fn asker_on(questions: &Arc<Questions>, stream: RequestStream, call: CancellationToken) -> Asker {
    Asker::new(
        Arc::clone(questions),
        "s1".into(),
        stream,
        eliciting(),
        call,
    )
}

/// One question of session `s1` on `stream`, waited for at most `timeout`.
async fn ask(
    questions: &Arc<Questions>,
    stream: RequestStream,
    timeout: Duration,
) -> Result<Box<RawValue>, AskFailed> {
    let asker = asker_on(questions, stream, CancellationToken::new());
    asker.ask("elicitation/create", Value::Null, timeout).await
}

#[tokio::test]
async fn an_unanswered_question_times_out_and_leaves_nothing_behind() {
    let questions = Arc::new(Questions::default());
    let (stream, _lines) = RequestStream::new();
    let got = ask(&questions, stream, Duration::from_millis(20)).await;
    assert!(matches!(got, Err(AskFailed::Timeout(_))), "{got:?}");
    assert_eq!(questions.waiting(), 0);
    // A client that keeps its stream open and never reads: once the backlog is full the
    // question cannot even be sent, and the timeout still ends the wait.
    let (stream, _unread) = RequestStream::new();
    for _ in 0..crate::gateway::agent::request_stream::BACKLOG {
        stream.offer(b"note".to_vec());
    }
    let got = ask(&questions, stream, Duration::from_millis(20)).await;
    assert!(matches!(got, Err(AskFailed::Timeout(_))), "{got:?}");
    assert_eq!(questions.waiting(), 0);
    // A stream whose client has gone: refused at once.
    let (stream, lines) = RequestStream::new();
    drop(lines);
    let got = ask(&questions, stream, Duration::from_secs(5)).await;
    assert!(matches!(got, Err(AskFailed::Closed)), "{got:?}");
    assert_eq!(questions.waiting(), 0);
    // A client that goes away while the question waits: the wait ends then.
    let (stream, mut lines) = RequestStream::new();
    let asker = asker_on(&questions, stream, CancellationToken::new());
    let asked = asker.ask("elicitation/create", Value::Null, Duration::from_secs(600));
    let leave = async move {
        let _question = lines.next().await;
        drop(lines);
    };
    let (got, ()) = tokio::join!(asked, leave);
    assert!(matches!(got, Err(AskFailed::Closed)), "{got:?}");
    assert_eq!(questions.waiting(), 0);
}

/// Gives a question up: given the server's token and the call's.
type GiveUp = fn(&CancellationToken, &CancellationToken);

/// An asker for session `s1` on the standalone streams of `slot`, its session ended once
/// `ended` is set.
fn standalone_on(
    questions: &Arc<Questions>,
    slot: &Arc<Standalone>,
    ended: &Arc<std::sync::atomic::AtomicBool>,
) -> Asker {
    let ended = Arc::clone(ended);
    Asker::standalone(
        Arc::clone(questions),
        "s1".into(),
        Arc::clone(slot),
        Arc::new(move || ended.load(Ordering::Relaxed)),
        eliciting(),
    )
}

fn question_id(line: &[u8]) -> String {
    let q: Value = serde_json::from_slice(line).unwrap();
    q["id"].as_str().unwrap().to_string()
}

#[tokio::test]
async fn a_standalone_question_dropped_with_its_get_goes_on_the_next_get() {
    let questions = Arc::new(Questions::default());
    let slot = Arc::new(Standalone::default());
    let ended = Arc::default();
    let asker = standalone_on(&questions, &slot, &ended);
    // The first GET goes away with the question queued on it, never taken.
    let first = slot.open().unwrap();
    let asked = asker.ask("elicitation/create", Value::Null, Duration::from_secs(600));
    let agent = async {
        tokio::task::yield_now().await;
        drop(first);
        let mut second = slot.open().expect("a new GET");
        let line = second.next().await.expect("the question, on the new GET");
        let id = question_id(&line);
        // The new GET closes too: the answer comes by a POST all the same.
        drop(second);
        assert!(questions.answer("s1", &id, Answered::Result(raw("{}"))));
    };
    let (got, ()) = tokio::join!(asked, agent);
    assert_eq!(got.unwrap().get(), "{}");
    assert_eq!(questions.waiting(), 0);
}

#[tokio::test]
async fn a_standalone_question_no_get_took_is_unsent() {
    let questions = Arc::new(Questions::default());
    let slot = Arc::new(Standalone::default());
    let ended = Arc::default();
    let asker = standalone_on(&questions, &slot, &ended);
    let got = asker
        .ask("elicitation/create", Value::Null, Duration::from_secs(600))
        .await;
    assert!(matches!(got, Err(AskFailed::Unsent)), "no GET: {got:?}");
    // A GET that goes away with the question queued, and none after it.
    let first = slot.open().unwrap();
    let asked = asker.ask("elicitation/create", Value::Null, Duration::from_secs(600));
    let leave = async {
        tokio::task::yield_now().await;
        drop(first);
    };
    let (got, ()) = tokio::join!(asked, leave);
    assert!(matches!(got, Err(AskFailed::Unsent)), "{got:?}");
    assert_eq!(questions.waiting(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_standalone_question_ends_with_its_session_and_its_withdrawal_goes_on_the_live_get() {
    let questions = Arc::new(Questions::default());
    let slot = Arc::new(Standalone::default());
    let ended = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let asker = standalone_on(&questions, &slot, &ended);
    let mut first = slot.open().unwrap();
    let asked = asker.ask("elicitation/create", Value::Null, Duration::from_secs(600));
    let agent = async {
        let line = first.next().await.expect("the question");
        drop(first);
        // The GET closing does not end the wait; the session's end does.
        tokio::time::sleep(SESSION_LOOK * 4).await;
        assert_eq!(questions.waiting(), 1, "still waiting for a POST");
        ended.store(true, Ordering::Relaxed);
        question_id(&line)
    };
    let started = tokio::time::Instant::now();
    let (got, id) = tokio::join!(asked, agent);
    assert!(matches!(got, Err(AskFailed::Closed)), "{got:?}");
    assert!(
        started.elapsed() < Duration::from_secs(600),
        "not at the timeout"
    );
    assert_eq!(questions.waiting(), 0);
    // A question withdrawn (here: timed out) is withdrawn on the GET open then, not on
    // the one it was asked on.
    ended.store(false, Ordering::Relaxed);
    let mut asked_on = slot.open().unwrap();
    let asked = asker.ask("elicitation/create", Value::Null, Duration::from_secs(5));
    let agent = async {
        let line = asked_on.next().await.expect("the question");
        drop(asked_on);
        let mut live = slot.open().unwrap();
        let told = live.next().await.expect("the withdrawal");
        (question_id(&line), told)
    };
    let (got, (id2, told)) = tokio::join!(asked, agent);
    assert!(matches!(got, Err(AskFailed::Timeout(_))), "{got:?}");
    assert_ne!(id, id2);
    let told: Value = serde_json::from_slice(&told).unwrap();
    assert_eq!(told["method"], "notifications/cancelled");
    assert_eq!(told["params"]["requestId"], id2.as_str());
}

/// Asks one question on a fresh stream, gives it up with `give_up` once the agent has
/// read it, and returns how the question ended and what the agent was told next.
async fn given_up(
    timeout: Duration,
    give_up: impl FnOnce(&CancellationToken, &CancellationToken),
) -> (Result<Box<RawValue>, AskFailed>, Value, Option<Value>) {
    let questions = Arc::new(Questions::default());
    let (stream, mut lines) = RequestStream::new();
    let call = CancellationToken::new();
    let asker = asker_on(&questions, stream, call.clone());
    let server = CancellationToken::new();
    let asked = asker.ask_until("sampling/createMessage", Value::Null, timeout, &server);
    let read = async {
        let line = lines.next().await.expect("the question");
        let q: Value = serde_json::from_slice(&line).unwrap();
        give_up(&server, &call);
        q["id"].clone()
    };
    let (got, id) = tokio::join!(asked, read);
    assert_eq!(questions.waiting(), 0);
    drop(asker);
    let told = lines
        .next()
        .await
        .map(|l| serde_json::from_slice::<Value>(&l).unwrap());
    (got, id, told)
}

#[tokio::test]
async fn a_question_given_up_after_it_was_sent_is_withdrawn_from_the_agent() {
    let long = Duration::from_secs(600);
    // The server that asked withdrew its request; the call the question serves was
    // cancelled; no answer came in time: each ends the wait, and the agent is told.
    let cases: [(&str, Duration, GiveUp); 3] = [
        ("withdrawn", long, |server, _| server.cancel()),
        ("call cancelled", long, |_, call| call.cancel()),
        ("timed out", Duration::from_millis(20), |_, _| {}),
    ];
    for (case, timeout, give_up) in cases {
        let (got, id, told) = given_up(timeout, give_up).await;
        let expected = if case == "timed out" {
            matches!(got, Err(AskFailed::Timeout(_)))
        } else {
            matches!(got, Err(AskFailed::Cancelled))
        };
        assert!(expected, "{case}: {got:?}");
        let told = told.unwrap_or_else(|| panic!("{case}: the agent was told nothing"));
        assert_eq!(told["method"], "notifications/cancelled", "{case}");
        assert_eq!(told["params"]["requestId"], id, "{case}");
    }
}

#[tokio::test]
async fn a_call_ended_without_an_answer_withdraws_its_question_before_its_stream_ends() {
    let questions = Arc::new(Questions::default());
    let (stream, mut lines) = RequestStream::new();
    let call = CancellationToken::new();
    let asker = asker_on(&questions, stream.clone(), call.clone());
    let asked = asker.ask("elicitation/create", Value::Null, Duration::from_secs(600));
    let end_the_call = async {
        let _question = lines.next().await;
        // The call is cancelled, and its stream ended as the fast path ends it.
        call.cancel();
        stream.end().await;
        let mut rest = Vec::new();
        while let Some(line) = lines.next().await {
            rest.push(serde_json::from_slice::<Value>(&line).unwrap());
        }
        rest
    };
    let (got, rest) = tokio::join!(asked, end_the_call);
    assert!(matches!(got, Err(AskFailed::Cancelled)), "{got:?}");
    assert_eq!(rest.len(), 1, "{rest:?}");
    assert_eq!(rest[0]["method"], "notifications/cancelled", "{rest:?}");
}

#[tokio::test]
async fn a_question_dropped_unanswered_is_withdrawn() {
    let questions = Arc::new(Questions::default());
    let (stream, mut lines) = RequestStream::new();
    let asker = asker_on(&questions, stream, CancellationToken::new());
    {
        let asked = asker.ask("elicitation/create", Value::Null, Duration::from_secs(600));
        tokio::pin!(asked);
        // Sent, then the asking future is dropped (an approval raced against its call).
        tokio::select! {
            biased;
            _ = &mut asked => panic!("answered with nobody answering"),
            line = lines.next() => assert!(line.is_some()),
        }
    }
    drop(asker);
    let told: Value = serde_json::from_slice(&lines.next().await.unwrap()).unwrap();
    assert_eq!(told["method"], "notifications/cancelled", "{told}");
    assert_eq!(questions.waiting(), 0);
}

#[tokio::test]
async fn a_question_never_sent_is_not_withdrawn() {
    let questions = Arc::new(Questions::default());
    let (stream, mut lines) = RequestStream::new();
    for _ in 0..crate::gateway::agent::request_stream::BACKLOG {
        stream.offer(b"{}".to_vec());
    }
    let call = CancellationToken::new();
    let asker = asker_on(&questions, stream, call.clone());
    call.cancel();
    let got = asker.ask("elicitation/create", Value::Null, Duration::from_secs(600));
    assert!(matches!(got.await, Err(AskFailed::Cancelled)));
    drop(asker);
    let mut told = 0;
    while let Some(line) = lines.next().await {
        assert_eq!(line, b"{}", "only the notes queued before");
        told += 1;
    }
    assert_eq!(told, crate::gateway::agent::request_stream::BACKLOG);
}

/// An agent on a stream of lines (stdio): the question is written as a line, its answer
/// comes back as the agent wrote it; a question the server withdraws is withdrawn from
/// the agent on the same stream; and once the agent has gone (`forget_session`) a
/// waiting question ends at once, not at its timeout.
#[tokio::test]
async fn an_agent_on_lines_is_asked_on_its_stream_and_its_going_ends_the_wait() {
    use tokio::io::{AsyncBufReadExt, BufReader};
    let questions = Arc::new(Questions::default());
    let (ours, theirs) = tokio::io::duplex(1 << 16);
    let out = LineOut::new(Box::new(ours), CancellationToken::new());
    let mut read = BufReader::new(theirs).lines();
    let ended = CancellationToken::new();
    let asker = Asker::on_lines(Arc::clone(&questions), out, ended.clone(), eliciting());
    let next = |line: Option<String>| -> Value { serde_json::from_str(&line.unwrap()).unwrap() };

    let asked = asker.ask(
        "sampling/createMessage",
        Value::Null,
        Duration::from_secs(600),
    );
    let answer = async {
        let q = next(read.next_line().await.unwrap());
        assert_eq!(q["method"], "sampling/createMessage");
        let id = q["id"].as_str().unwrap().to_string();
        assert!(!questions.answer("s1", &id, Answered::Result(raw("null"))));
        assert!(questions.answer(LINES_SESSION, &id, Answered::Result(raw(r#"{"n":1e3}"#))));
    };
    let (got, ()) = tokio::join!(asked, answer);
    assert_eq!(got.unwrap().get(), r#"{"n":1e3}"#);

    let server = CancellationToken::new();
    let asked = asker.ask_until(
        "sampling/createMessage",
        Value::Null,
        Duration::from_secs(600),
        &server,
    );
    let withdraw = async {
        let q = next(read.next_line().await.unwrap());
        server.cancel();
        let told = next(read.next_line().await.unwrap());
        assert_eq!(told["method"], "notifications/cancelled", "{told}");
        assert_eq!(told["params"]["requestId"], q["id"], "{told}");
    };
    let (got, ()) = tokio::join!(asked, withdraw);
    assert!(matches!(got, Err(AskFailed::Cancelled)), "{got:?}");

    let asked = asker.ask(
        "sampling/createMessage",
        Value::Null,
        Duration::from_secs(600),
    );
    let leave = async {
        let _question = read.next_line().await.unwrap();
        assert_eq!(questions.waiting(), 1);
        questions.forget_session(LINES_SESSION);
    };
    let (got, ()) = tokio::join!(asked, leave);
    assert!(matches!(got, Err(AskFailed::Closed)), "{got:?}");
    assert_eq!(questions.waiting(), 0);

    // Once the agent's reader has ended, a new question is not even sent.
    ended.cancel();
    let got = asker.ask(
        "sampling/createMessage",
        Value::Null,
        Duration::from_secs(600),
    );
    assert!(matches!(got.await, Err(AskFailed::Closed)));
    assert_eq!(questions.waiting(), 0);
}
