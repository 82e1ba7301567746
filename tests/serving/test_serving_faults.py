"""Servers that misbehave: failure records, replays that end in time, processes always torn down."""

import socket
import sys
import time

import pytest
from serving_helpers import instant_server, settings

from infbench.config.model import default_servers
from infbench.serving import replay, request_records, servers, streamed_response, workload
from infbench.serving.traces import weka

SESSION = weka.session(
    {
        "id": "f",
        "block_size": 4,
        "requests": [
            {"t": 0, "in": 8, "out": 4, "hash_ids": [0, 1], "think_time": 0},
            {"t": 1, "in": 12, "out": 4, "hash_ids": [0, 1, 2], "think_time": 0.05},
            {"t": 2, "in": 16, "out": 4, "hash_ids": [0, 1, 2, 3], "think_time": 0.05},
        ],
    }
)


def _port_closed(base: str) -> bool:
    host, port = base.removeprefix("http://").split(":")
    with socket.socket() as s:
        return s.connect_ex((host, int(port))) != 0


@pytest.mark.slow
@pytest.mark.parametrize(
    "mode, error",
    [
        ("die", "Error"),  # connection refused / reset once the process is gone
        ("hang", "timed out after"),
        ("malformed", "JSONDecodeError"),
        ("short", "3 output tokens, 4 prescribed"),
        ("bad_usage", "usage.completion_tokens=5 but 4 token ids streamed"),
        # the client's own limits: neither its memory nor its time is the server's to take
        ("endless_line", "ResponseTooLarge: response larger than"),
        ("trickle", "timed out after"),
        ("oversize", "ResponseTooLarge: response larger than"),
        ("endless_tokens", "more token ids streamed than max_tokens=4"),
    ],
)
def test_misbehaving_server(tmp_path, mode, error):
    window, timeout = 2.0, 1.5
    with instant_server(tmp_path / "server.log", "--mode", mode, "--after", "1") as base:
        t = time.monotonic()
        recs = replay.run(workload.draw([SESSION], 0), settings(base, window_s=window, request_timeout_s=timeout))
        elapsed = time.monotonic() - t
    assert _port_closed(base)
    # bounded by the client's own limits (without them a hanging server holds it forever); the slack is for a
    # loaded machine (5.4 to 6.0 s seen against 5.0 with other test processes on both cores)
    assert elapsed <= window + timeout + 3.0
    assert recs[0].ok and recs[0].request_id == "main/0"  # the first request was served properly
    bad = [r for r in recs if not r.ok]
    assert bad and all(error in r.error for r in bad), {r.error for r in bad}
    assert all(r.ok or (r.ttft != r.ttft and r.tpot != r.tpot) for r in recs)  # failures carry no latency


def test_server_that_does_not_start(tmp_path):
    spec = servers.ServerSpec(command=["{python}", "-c", "import sys; print('no model here'); sys.exit(3)"])
    with pytest.raises(servers.ServerFailed, match="(?s)exited with 3.*no model here"):
        with servers.launched("broken", spec, servers.LaunchVars(), tmp_path / "broken.log"):
            pass
    spec = servers.ServerSpec(command=["{python}", "-c", "import time; time.sleep(60)"], startup_timeout_s=1.0)
    t = time.monotonic()
    with pytest.raises(servers.ServerFailed, match="not healthy"):
        with servers.launched("silent", spec, servers.LaunchVars(), tmp_path / "silent.log"):
            pass
    assert time.monotonic() - t < 10


def test_spec_placeholders_are_checked():
    spec = servers.ServerSpec(
        command=["vllm", "serve", "{model_dir}", "--port", "{port}", "--tp", "{gpus}"], runnable=False
    )
    with pytest.raises(Exception, match="serving.servers.vllm.command.*gpus"):
        servers.dry_run("vllm", spec, servers.LaunchVars(model_dir="m"))
    ok = servers.ServerSpec(command=["{python}", "-m", "x", "--port", "{port}"])
    assert servers.dry_run("x", ok, servers.LaunchVars()) == f"{sys.executable} -m x --port 8000"


def test_a_specs_cpu_arguments_follow_its_command_on_a_cpu_deployment_only():
    vllm = default_servers()["vllm"]
    on_cpu = servers.render("vllm", vllm, servers.LaunchVars(model_dir="m", accelerator="cpu"))
    on_gpu = servers.render("vllm", vllm, servers.LaunchVars(model_dir="m", accelerator="gpu"))
    assert on_cpu == on_gpu + ["--enforce-eager"]


def test_sse_events_split_across_reads_and_data_after_done():
    """Events are parsed from whole network reads; an event cut between two reads is joined, and
    anything but blank lines after ``data: [DONE]`` makes the response malformed."""
    stream = streamed_response.StreamedResponse(max_tokens=2, byte_limit=1 << 16)
    body = b'data: {"choices": [{"text": "a", "token_ids": [7]}]}\n\ndata: {"choices": [{"text": "b", "tok'
    rest = b'en_ids": [8]}]}\n\ndata: [DONE]\n\n'
    stream.receive(body, 1.0)
    stream.receive(rest, 2.0)
    assert stream.done and stream.ids == [7, 8] and (stream.first, stream.last) == (1.0, 2.0)
    with pytest.raises(ValueError, match="after \\[DONE\\]"):
        stream.line(b'data: {"choices": []}', 3.0)


def test_a_token_arrives_with_its_id():
    """TTFT is the first chunk carrying a token id: text sent before it (a fake early first token, whitespace
    at stream open) is counted apart and never times the request; usage must equal the streamed ids."""
    stream = streamed_response.StreamedResponse(max_tokens=2, byte_limit=1 << 16)
    stream.receive(b'data: {"choices": [{"text": " ", "token_ids": []}]}\n\n', 0.01)
    stream.receive(b'data: {"choices": [{"text": "a", "token_ids": [7]}]}\n\n', 0.8)
    stream.receive(b'data: {"choices": [{"text": "", "token_ids": [8]}]}\n\n', 0.9)
    stream.receive(
        b'data: {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 2}}\n\ndata: [DONE]\n\n', 0.95
    )
    assert (stream.first, stream.last) == (0.8, 0.9) and stream.text_without_ids == 1 and stream.id_chunks == 2
    assert streamed_response.token_accounting(stream, 3, 2) == (2, "")

    lying = streamed_response.StreamedResponse(
        max_tokens=5, byte_limit=1 << 16
    )  # no ids: one text chunk claims 5 tokens; counted by usage, unverified
    lying.receive(b'data: {"choices": [{"text": "abcde"}]}\n\n', 0.5)
    lying.receive(
        b'data: {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 5}}\n\ndata: [DONE]\n\n', 0.5
    )
    assert (
        not lying.saw_ids
        and lying.first == lying.last == 0.5
        and streamed_response.token_accounting(lying, 3, 5) == (5, "")
    )


@pytest.mark.slow
def test_context_overflows_are_marked_and_invalidate_the_run(tmp_path):
    """A server with a smaller context than the trace needs: its refusals are context-overflow failures,
    never completed work, and the run scores D = 0 as invalid (more than 1% overflowed)."""
    from infbench.config.model import Deployment
    from infbench.serving.value import Targets, score

    with instant_server(tmp_path / "server.log", "--context-limit", "18") as base:  # main/2 needs 16 + 4
        recs = replay.run(workload.draw([SESSION], 0), settings(base, window_s=1.5))
    frame = request_records.write_records(recs, str(tmp_path / "records.parquet"))
    over = [r for r in recs if r.context_overflow]
    assert over and all(r.request_id == "main/2" and not r.ok and "maximum context length" in r.error for r in over)
    assert not any(r.context_overflow for r in recs if r.request_id != "main/2")
    dep = Deployment(
        name="d",
        devices=1,
        accelerator="cpu",
        usd_per_device_hour=1.0,
        input_usd_per_mtok=1.0,
        output_usd_per_mtok=1.0,
        context_limit=18,
    )
    s = score(frame, dep, 1.5, 0.01, Targets(tau_first_s=10.0, tau_token_s=10.0))
    assert not s.valid and s.D == 0.0 and s.context_overflows == len(over) and "overflowed" in s.invalid_reason


@pytest.mark.parametrize(
    "mode, error",
    [
        ("endless_line", "ResponseTooLarge: response larger than 69760 bytes"),  # 64 KiB + 16 x 8 + 4 KiB
        ("trickle", "StreamTimeout: stream still open after 1.5 s"),
        ("oversize", "ResponseTooLarge"),
        ("endless_tokens", "ResponseTooLarge"),
    ],
)
def test_a_probe_stays_within_its_limits(tmp_path, mode, error):
    """The verifier's probes read a stream as the replay does: bounded in bytes, and in time whatever the
    server trickles (a read timeout alone would wait forever on a byte every 0.2 s)."""
    import resource

    from infbench.serving.verify import probes

    with instant_server(tmp_path / "server.log", "--mode", mode) as base:
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        t = time.monotonic()
        c = probes.complete(base, "instant", list(range(8)), 1, ignore_eos=True, timeout_s=1.5)
        elapsed = time.monotonic() - t
    assert not c.ok and error in c.error, c.error
    assert elapsed < 1.5 + 0.5 and resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 64 << 10  # KiB


def test_health_is_its_status_and_never_its_body(tmp_path):
    """A health endpoint whose 200 response never ends is healthy at once: its body is not read."""
    t = time.monotonic()
    with instant_server(tmp_path / "server.log", "--mode", "endless_health"):
        pass
    assert time.monotonic() - t < 30


def test_lines_within_the_limit_come_before_the_overflow():
    """A read that crosses the byte limit (reads coalesce under load) hands over the lines completed within the
    limit first, so a stream that broke another rule before its size is failed for that; the next call fails
    with ResponseTooLarge, and so does asking for the rest."""
    from infbench.serving.sse import BoundedLines, ResponseTooLarge

    lines = BoundedLines(limit=25)
    assert lines.feed(b"one\ntwo\n") == [b"one", b"two"]
    assert lines.feed(b"three\nfour\nfive\nsix\n") == [b"three", b"four", b"five"]  # 17 more bytes fit in 25
    with pytest.raises(ResponseTooLarge, match="larger than 25 bytes"):
        lines.feed(b"x\n")
    with pytest.raises(ResponseTooLarge):
        lines.rest()
    endless = BoundedLines(limit=8)
    with pytest.raises(ResponseTooLarge):  # no line ended within the limit: at once
        endless.feed(b"x" * 9)
