// Submit one job to Spillway through its NATS door, with nats.js v3.
//
//   npm run submit -- --server nats://127.0.0.1:4222 --queue email \
//     --header X-Client-Id=tenant-a --data 'hello'
//
// The request goes to spillway.submit.<queue>; its body is the payload and
// its headers are what the queue's limits key on, plus Idempotency-Key.
// The reply is JSON with a status: admitted, queued, rejected or error,
// and the same status in the Spillway-Status header.
//
// A rejection carries retry_after_ms (the NATS door's Retry-After): this
// program waits that long and sends the same job again, with the same
// idempotency key, up to --tries times. The key makes the retry safe: had
// an earlier try been taken after all (its reply lost on the way), the
// admitter answers with that try's verdict and "duplicate": true instead
// of taking the job twice.
//
// --count N submits N jobs one after another, the i-th with the key
// <idempotency-key>-<i>, each retried as above: a producer that honours
// Retry-After slows down to what the queue's limits take.
//
// Exit status: 0 every job admitted or queued, 3 a job still rejected after
// its last try, 1 an error (the reply's or the connection's), 2 bad
// arguments.
import { randomUUID } from "node:crypto";
import { parseArgs } from "node:util";
import { connect, headers, type NatsConnection } from "@nats-io/transport-node";

// SubmitReply is the door's answer (the same on the HTTP door).
interface SubmitReply {
  id?: string;
  queue: string;
  status: "admitted" | "queued" | "rejected" | "error";
  position?: number;
  estimated_start?: string;
  not_before?: string;
  retry_after_ms?: number;
  duplicate?: boolean;
  error?: string;
  type?: string;
}

const usage = `usage: node --import tsx submit.ts --queue NAME [--server URL] [--header NAME=VALUE]...
       [--data TEXT] [--count N] [--idempotency-key KEY] [--tries N]
       [--max-wait-ms MS] [--timeout-ms MS]`;

function fail(code: number, msg: string): never {
  console.error(msg);
  process.exit(code);
}

function options() {
  let parsed;
  try {
    parsed = parseArgs({
      options: {
        server: { type: "string", default: "nats://127.0.0.1:4222" },
        queue: { type: "string" },
        header: { type: "string", multiple: true, default: [] },
        data: { type: "string", default: "" },
        count: { type: "string", default: "1" },
        "idempotency-key": { type: "string" },
        tries: { type: "string", default: "5" },
        "max-wait-ms": { type: "string", default: "30000" },
        "timeout-ms": { type: "string", default: "10000" },
      },
      strict: true,
    }).values;
  } catch (e) {
    fail(2, `${(e as Error).message}\n${usage}`);
  }
  if (!parsed.queue) {
    fail(2, `--queue is required\n${usage}`);
  }
  const int = (name: string, v: string, min: number): number => {
    const n = Number(v);
    if (!Number.isInteger(n) || n < min) {
      fail(2, `--${name} ${JSON.stringify(v)}: want an integer >= ${min}`);
    }
    return n;
  };
  const hdrs: [string, string][] = [];
  for (const h of parsed.header) {
    const eq = h.indexOf("=");
    if (eq <= 0) {
      fail(2, `--header ${JSON.stringify(h)}: want NAME=VALUE`);
    }
    hdrs.push([h.slice(0, eq), h.slice(eq + 1)]);
  }
  return {
    server: parsed.server,
    queue: parsed.queue,
    headers: hdrs,
    data: parsed.data,
    count: int("count", parsed.count, 1),
    // One key for every try of this job: a retry is the same job.
    idempotencyKey: parsed["idempotency-key"] ?? randomUUID(),
    tries: int("tries", parsed.tries, 1),
    maxWaitMS: int("max-wait-ms", parsed["max-wait-ms"], 0),
    timeoutMS: int("timeout-ms", parsed["timeout-ms"], 1),
  };
}

type Options = ReturnType<typeof options>;

async function submitOnce(nc: NatsConnection, o: Options, idempotencyKey: string): Promise<SubmitReply> {
  const h = headers();
  for (const [name, value] of o.headers) {
    h.append(name, value);
  }
  h.set("Idempotency-Key", idempotencyKey);
  const msg = await nc.request(`spillway.submit.${o.queue}`, o.data, { timeout: o.timeoutMS, headers: h });
  const rep = msg.json<SubmitReply>();
  const status = msg.headers?.get("Spillway-Status");
  if (status && status !== rep.status) {
    throw new Error(`reply header Spillway-Status ${status} but body status ${rep.status}`);
  }
  return rep;
}

function describe(rep: SubmitReply): string {
  const parts = [`${rep.status} id=${rep.id} queue=${rep.queue}`];
  if (rep.status === "queued") {
    parts.push(`position=${rep.position} estimated_start=${rep.estimated_start}`);
  }
  if (rep.duplicate) {
    parts.push("duplicate=true");
  }
  return parts.join(" ");
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

// submit sends one job until it is taken or given up on; it returns the
// exit status.
async function submit(nc: NatsConnection, o: Options, idempotencyKey: string): Promise<number> {
  for (let attempt = 1; ; attempt++) {
    const rep = await submitOnce(nc, o, idempotencyKey);
    switch (rep.status) {
      case "admitted":
      case "queued":
        console.log(describe(rep));
        return 0;
      case "rejected": {
        // The door says when a try can succeed; wait that long, unless
        // that is more than --max-wait-ms (not worth waiting for here).
        const wait = rep.retry_after_ms ?? 1000;
        if (attempt >= o.tries || wait > o.maxWaitMS) {
          console.log(`rejected type=${rep.type} retry_after_ms=${wait} after ${attempt} tries`);
          return 3;
        }
        console.log(`rejected type=${rep.type}: retrying in ${wait}ms (try ${attempt} of ${o.tries})`);
        await sleep(wait);
        continue;
      }
      default:
        console.error(`error type=${rep.type}: ${rep.error}`);
        return 1;
    }
  }
}

async function main(): Promise<number> {
  const o = options();
  const nc = await connect({ servers: o.server, name: "spillway-ts-producer" });
  try {
    console.log(`idempotency-key=${o.idempotencyKey}`);
    for (let i = 1; i <= o.count; i++) {
      const code = await submit(nc, o, o.count === 1 ? o.idempotencyKey : `${o.idempotencyKey}-${i}`);
      if (code !== 0) {
        return code;
      }
    }
    return 0;
  } finally {
    await nc.drain();
  }
}

main().then(
  (code) => process.exit(code),
  (e: Error) => fail(1, `submit: ${e.message}`),
);
