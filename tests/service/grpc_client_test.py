"""The client gRPC API (proto/client.proto) of `tandem serve --grpc-port 0`,
called from Python stubs generated from the proto: ListModels, Health, a
streamed Generate whose ids and text equal the HTTP API's for the same
request, token-id prompts, error codes, and a cancelled stream freeing its
request at once.

usage: grpc_client_test.py TANDEM PROTO_DIR MODEL_DIR WORK_DIR
"""
import json
import os
import re
import sys
import time
import urllib.request

import grpc
from grpc_tools import protoc

from harness import Checks, Serve


def load_stubs(proto_dir, work):
    os.makedirs(work, exist_ok=True)
    rc = protoc.main(["protoc", f"-I{proto_dir}", f"--python_out={work}",
                      f"--grpc_python_out={work}", os.path.join(proto_dir, "client.proto")])
    if rc != 0:
        raise RuntimeError(f"protoc failed ({rc})")
    sys.path.insert(0, work)
    import client_pb2
    import client_pb2_grpc
    return client_pb2, client_pb2_grpc


def running_requests(serve):
    with urllib.request.urlopen(serve.url + "/metrics", timeout=10) as r:
        body = r.read().decode()
    m = re.search(r"^vllm:num_requests_running\{[^}]*\} (\S+)$", body, re.M)
    return float(m.group(1)) if m else -1


def main():
    tandem, proto_dir, model, work = sys.argv[1:5]
    pb, pb_grpc = load_stubs(proto_dir, work)
    checks = Checks()
    serve = Serve(tandem, model, "--grpc-port", "0", "--max-model-len", "4096")
    try:
        addr = None
        for line in serve.stdout_lines:
            m = re.match(r"gRPC API on (\S+)$", line)
            if m:
                addr = m.group(1)
        if not checks.check("serve printed the gRPC address", addr is not None,
                            str(serve.stdout_lines)):
            return
        channel = grpc.insecure_channel(addr)
        stub = pb_grpc.TandemStub(channel)

        models = stub.ListModels(pb.ListModelsRequest(), timeout=10)
        checks.check("ListModels names the model with its context",
                     [(m.id, m.max_context) for m in models.models] == [("model", 4096)],
                     str(models))
        health = stub.Health(pb.HealthRequest(), timeout=10)
        checks.check("Health is ready", health.ready, str(health))

        prompt = "The river carried cold water past"
        req = pb.GenerateRequest(model="model", text=prompt, sampling=pb.SamplingParams(
            max_tokens=12, ignore_eos=True, top_logprobs=0))
        ids, text, logprobs, last = [], "", [], None
        for msg in stub.Generate(req, timeout=60):
            ids += list(msg.token_ids)
            text += msg.text
            logprobs += list(msg.logprobs)
            last = msg
        status, http = serve.post("/v1/completions", {
            "model": "model", "prompt": prompt, "max_tokens": 12, "temperature": 0,
            "ignore_eos": True, "logprobs": 0, "return_tokens_as_token_ids": True})
        http_ids = [int(t.split(":")[1]) for t in http["choices"][0]["logprobs"]["tokens"]]
        checks.check("streamed Generate ids and text equal the HTTP completion's",
                     status == 200 and ids == http_ids and text == http["choices"][0]["text"],
                     f"{ids} {text!r} vs {http_ids} {http['choices'][0]['text']!r}")
        checks.check("one log-prob per token, as HTTP's",
                     len(logprobs) == 12 and all(
                         abs(a - b) < 1e-4 for a, b in
                         zip(logprobs, http["choices"][0]["logprobs"]["token_logprobs"])))
        checks.check("the last message has finish_reason and usage",
                     last.finish_reason == "length" and last.usage.completion_tokens == 12
                     and last.usage.prompt_tokens == http["usage"]["prompt_tokens"], str(last))

        def code_of(request):
            try:
                for _ in stub.Generate(request, timeout=30):
                    pass
                return grpc.StatusCode.OK
            except grpc.RpcError as e:
                return e.code()

        # A JSON Schema over gRPC: the same answer as the HTTP API's
        # response_format for the same request, and an object of the schema.
        schema = ('{"type": "object", "properties": {"name": {"type": "string", "maxLength": 12},'
                  ' "count": {"type": "integer", "minimum": 0, "maximum": 99}}, "required": ["name", "count"]}')
        req = pb.GenerateRequest(model="model", text=prompt, sampling=pb.SamplingParams(
            max_tokens=400, json_schema=schema))
        text = "".join(msg.text for msg in stub.Generate(req, timeout=60))
        status, http = serve.post("/v1/completions", {
            "model": "model", "prompt": prompt, "max_tokens": 400, "temperature": 0,
            "response_format": {"type": "json_schema",
                                "json_schema": {"name": "n", "schema": json.loads(schema)}}})
        try:
            value = json.loads(text)
        except ValueError:
            value = None
        checks.check("a json_schema Generate answers as HTTP's response_format, by the schema",
                     status == 200 and text == http["choices"][0]["text"]
                     and isinstance(value, dict) and list(value) == ["name", "count"]
                     and isinstance(value["count"], int) and len(value["name"]) <= 12,
                     f"{text!r} vs {http}")
        checks.check("a schema that cannot be enforced is INVALID_ARGUMENT",
                     code_of(pb.GenerateRequest(model="model", text="x", sampling=pb.SamplingParams(
                         json_schema='{"not": {}}'))) == grpc.StatusCode.INVALID_ARGUMENT)

        by_ids = pb.GenerateRequest(model="model", token_ids=pb.TokenIds(ids=[1, 415, 5566]),
                                    sampling=pb.SamplingParams(max_tokens=5, ignore_eos=True))
        got = [i for msg in stub.Generate(by_ids, timeout=60) for i in msg.token_ids]
        checks.check("a token-id prompt generates", len(got) == 5, str(got))

        checks.check("unknown model is NOT_FOUND",
                     code_of(pb.GenerateRequest(model="nope", text="x")) ==
                     grpc.StatusCode.NOT_FOUND)
        checks.check("max_tokens beyond the context is INVALID_ARGUMENT",
                     code_of(pb.GenerateRequest(model="model", text="x", sampling=pb.SamplingParams(
                         max_tokens=100000))) == grpc.StatusCode.INVALID_ARGUMENT)
        checks.check("a token id outside the vocabulary is INVALID_ARGUMENT",
                     code_of(pb.GenerateRequest(model="model", token_ids=pb.TokenIds(
                         ids=[1, 999999]))) == grpc.StatusCode.INVALID_ARGUMENT)

        # Cancel a long stream: its request must stop running at once.
        call = stub.Generate(pb.GenerateRequest(model="model", text=prompt, sampling=pb.SamplingParams(
            max_tokens=4000, ignore_eos=True)), timeout=120)
        n = 0
        for _ in call:
            n += 1
            if n == 3:
                break
        running_before = running_requests(serve)
        call.cancel()
        deadline = time.time() + 2
        while time.time() < deadline and running_requests(serve) != 0:
            time.sleep(0.05)
        checks.check(f"a cancelled stream stops its request within 2 s "
                     f"(running {running_before} -> {running_requests(serve)})",
                     running_requests(serve) == 0)
        channel.close()
    finally:
        rc, alive, shm = serve.stop()
    checks.check("serve exits 0 on SIGTERM", rc == 0 and not alive and not shm,
                 f"rc={rc} alive={alive} shm={shm}")
    checks.finish()


if __name__ == "__main__":
    main()
