// A small Rivet app for the test suite: one actor kind, `vm`, whose
// instances each provision an Actor Runtime Socket over their own SQLite
// database. It runs Rivet's published runtime (`rivetkit` and the
// `rivet-engine` it bundles, in local development mode on loopback) and is
// driven over its standard streams:
//
//   in:  {"id": N, "op": "provision", "key": K}   -> {"id": N, "ok": {"socket": PATH}}
//        {"id": N, "op": "query", "key": K, "sql": S} -> {"id": N, "ok": [rows]}
//   out: {"rivetPeer": "ready", "engine": {"pid": P}} once the engine serves
//
// Every line it writes for its driver carries "rivetPeer" (the runtime's own
// logs may share the stream). When its standard input closes it stops the
// engine by pid, removes its scratch folder (AGENTOS_RIVET_SCRATCH: its home,
// with the engine's data and the socket directory) and exits. Its driver runs it in a private network namespace
// with only loopback, so nothing it starts reaches outside.
"use strict";

const fs = require("node:fs");
const path = require("node:path");
const readline = require("node:readline");
const { createRequire } = require("node:module");

const peers = process.env.AGENTOS_PEERS;
if (!peers) {
    process.stderr.write("rivet runtime: AGENTOS_PEERS must name the peers folder\n");
    process.exit(2);
}
const load = createRequire(path.join(peers, "package.json"));
const { actor, setup } = load("rivetkit");
const { db } = load("rivetkit/db");
const { createClient } = load("rivetkit/client");

const vm = actor({
    options: { enableActorRuntimeSocket: true, noSleep: true },
    db: db(),
    actions: {
        socket: async (c) => (await c.actorRuntimeSocket()).path,
        query: async (c, sql) => await c.db.execute(sql),
    },
});

const endpoint = "http://127.0.0.1:6420";
const registry = setup({ use: { vm }, startEngine: true, noWelcome: true });
registry.start();
const client = createClient(endpoint);

function say(message) {
    process.stdout.write(JSON.stringify({ rivetPeer: true, ...message }) + "\n");
}

function enginePid() {
    const runtime = path.join(process.env.HOME || "", ".rivetkit/var/engine/runtime.json");
    try {
        return JSON.parse(fs.readFileSync(runtime, "utf8")).pid;
    } catch {
        return undefined;
    }
}

async function provision(key) {
    // The engine takes a moment to accept its first actor; retry until it does.
    const deadline = Date.now() + 60_000;
    for (;;) {
        try {
            return { socket: await client.vm.getOrCreate([key]).socket() };
        } catch (error) {
            if (Date.now() > deadline) throw error;
            await new Promise((resolve) => setTimeout(resolve, 250));
        }
    }
}

async function handle(request) {
    switch (request.op) {
        case "provision":
            return await provision(String(request.key));
        case "query":
            return await client.vm.getOrCreate([String(request.key)]).query(String(request.sql));
        default:
            throw new Error(`unknown op ${request.op}`);
    }
}

let stopping = false;
async function stop(code) {
    if (stopping) return;
    stopping = true;
    const pid = enginePid();
    if (pid) {
        try {
            process.kill(pid, "SIGTERM");
            for (let i = 0; i < 50; i++) {
                process.kill(pid, 0);
                await new Promise((resolve) => setTimeout(resolve, 100));
            }
            process.kill(pid, "SIGKILL");
        } catch {
            // Gone.
        }
    }
    // The driver's scratch folder (engine data, the socket directory) goes
    // with the runtime, unless the runtime failed and its log is wanted.
    const scratch = process.env.AGENTOS_RIVET_SCRATCH;
    if (scratch && code === 0) {
        fs.rmSync(scratch, { recursive: true, force: true });
    }
    process.exit(code);
}

(async () => {
    try {
        await provision("agentos-warm-up");
    } catch (error) {
        process.stderr.write(`rivet runtime: the engine never served: ${error}\n`);
        await stop(1);
        return;
    }
    say({ event: "ready", engine: { pid: enginePid() } });
    const lines = readline.createInterface({ input: process.stdin });
    lines.on("line", (line) => {
        let request;
        try {
            request = JSON.parse(line);
        } catch {
            say({ id: null, error: "not JSON" });
            return;
        }
        handle(request).then(
            (ok) => say({ id: request.id, ok }),
            (error) => say({ id: request.id, error: String(error && error.message || error) }),
        );
    });
    lines.on("close", () => stop(0));
})();
process.on("SIGTERM", () => stop(0));
process.on("SIGINT", () => stop(0));
