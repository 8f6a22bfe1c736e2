// A plain ACP client, the ACP SDK's own `ClientSideConnection`, driving an
// agent given on the command line: initialize, a new session, one prompt.
// Prints one JSON line: the session updates it was handed, what the SDK
// complained about (its console.error), and how the prompt ended.
// AGENTOS_PEERS names the folder holding node_modules/@agentclientprotocol/sdk.
import { spawn } from "node:child_process";
import { Readable, Writable } from "node:stream";
import { pathToFileURL } from "node:url";
import { join } from "node:path";

const sdk = join(process.env.AGENTOS_PEERS, "node_modules/@agentclientprotocol/sdk/dist/acp.js");
const acp = await import(pathToFileURL(sdk).href);

const complaints = [];
console.error = (...args) => {
  complaints.push(args.map((a) => (a instanceof Error ? a.message : typeof a === "string" ? a : JSON.stringify(a))).join(" "));
};

const [program, ...args] = process.argv.slice(2);
const agent = spawn(program, args, { stdio: ["pipe", "pipe", "ignore"] });
const updates = [];
const handler = {
  async sessionUpdate(params) {
    updates.push(params.update);
  },
  async requestPermission() {
    return { outcome: { outcome: "cancelled" } };
  },
  async readTextFile() {
    return { content: "" };
  },
  async writeTextFile() {
    return {};
  },
};
const stream = acp.ndJsonStream(Writable.toWeb(agent.stdin), Readable.toWeb(agent.stdout));
const connection = new acp.ClientSideConnection(() => handler, stream);
let prompt = null;
try {
  await connection.initialize({ protocolVersion: acp.PROTOCOL_VERSION, clientCapabilities: {} });
  const session = await connection.newSession({ cwd: "/", mcpServers: [] });
  try {
    const answer = await connection.prompt({
      sessionId: session.sessionId,
      prompt: [{ type: "text", text: "hello" }],
    });
    prompt = { stopReason: answer.stopReason };
  } catch (error) {
    prompt = { error: { code: error.code, message: error.message, data: error.data ?? null } };
  }
} catch (error) {
  prompt = { setupError: String(error && error.message) };
}
// Let any notification still in flight reach the handler.
await new Promise((resolve) => setTimeout(resolve, 200));
process.stdout.write(JSON.stringify({ updates, complaints, prompt }) + "\n");
agent.kill();
process.exit(0);
