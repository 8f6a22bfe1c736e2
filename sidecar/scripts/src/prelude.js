// The realm prelude of the script engine: evaluated before the workflow
// module, it closes the doors to nondeterminism and to the outside world,
// and builds `ctx` over three native functions. It evaluates to a function
// so those natives never become globals the script could reach.
(function (effect, log, progress) {
  'use strict';
  const G = globalThis;
  const AsyncFunctionProto = Object.getPrototypeOf(async function () {});
  const GeneratorFunctionProto = Object.getPrototypeOf(function* () {});
  const AsyncGeneratorFunctionProto = Object.getPrototypeOf(async function* () {});

  function unavailable(name, instead) {
    const f = function () {
      throw new Error(name + ' is unavailable in scripts: ' + instead);
    };
    return f;
  }

  Math.random = unavailable('Math.random', 'pass random values in the input or get them from a tool with ctx.call()');
  const DateStub = unavailable('Date', 'use ctx.now()');
  DateStub.now = unavailable('Date.now', 'use ctx.now()');
  DateStub.parse = unavailable('Date.parse', 'use ctx.now()');
  DateStub.UTC = unavailable('Date.UTC', 'use ctx.now()');
  G.Date = DateStub;

  G.setTimeout = unavailable('setTimeout', 'use await ctx.sleep(ms)');
  G.setInterval = unavailable('setInterval', 'use ctx.sleep(ms) in a loop');
  G.setImmediate = unavailable('setImmediate', 'use await ctx.sleep(ms)');
  G.clearTimeout = unavailable('clearTimeout', 'timers do not exist; use ctx.sleep(ms)');
  G.clearInterval = unavailable('clearInterval', 'timers do not exist; use ctx.sleep(ms)');
  G.fetch = unavailable('fetch', 'use ctx.call() with a tool that reaches the network');
  G.XMLHttpRequest = unavailable('XMLHttpRequest', 'use ctx.call() with a tool that reaches the network');
  G.require = unavailable('require', 'scripts are self-contained modules; use ctx.call() for tools');
  G.performance = Object.freeze({ now: unavailable('performance.now', 'use ctx.now()') });
  // Garbage collection runs at different times in different runs.
  G.WeakRef = unavailable('WeakRef', 'hold the object itself');
  G.FinalizationRegistry = unavailable('FinalizationRegistry', 'release resources explicitly');
  G.eval = unavailable('eval', 'write the code in the script itself');

  const FunctionStub = unavailable('Function', 'write the code in the script itself');
  FunctionStub.prototype = Function.prototype;
  for (const proto of [Function.prototype, AsyncFunctionProto, GeneratorFunctionProto, AsyncGeneratorFunctionProto]) {
    Object.defineProperty(proto, 'constructor', { value: FunctionStub, writable: false, configurable: false });
  }
  G.Function = FunctionStub;

  // UTF-8 only, which is all a script needs to size or split text.
  class TextEncoder {
    get encoding() { return 'utf-8'; }
    encode(input = '') {
      const s = String(input);
      const out = [];
      for (let i = 0; i < s.length; i++) {
        let c = s.charCodeAt(i);
        if (c >= 0xd800 && c <= 0xdbff && i + 1 < s.length) {
          const d = s.charCodeAt(i + 1);
          if (d >= 0xdc00 && d <= 0xdfff) {
            c = 0x10000 + ((c - 0xd800) << 10) + (d - 0xdc00);
            i++;
          } else {
            c = 0xfffd;
          }
        } else if (c >= 0xd800 && c <= 0xdfff) {
          c = 0xfffd;
        }
        if (c < 0x80) out.push(c);
        else if (c < 0x800) out.push(0xc0 | (c >> 6), 0x80 | (c & 63));
        else if (c < 0x10000) out.push(0xe0 | (c >> 12), 0x80 | ((c >> 6) & 63), 0x80 | (c & 63));
        else out.push(0xf0 | (c >> 18), 0x80 | ((c >> 12) & 63), 0x80 | ((c >> 6) & 63), 0x80 | (c & 63));
      }
      return new Uint8Array(out);
    }
  }
  class TextDecoder {
    constructor(label = 'utf-8', options = {}) {
      if (!/^utf-?8$/i.test(String(label))) throw new RangeError('TextDecoder supports only utf-8');
      this.fatal = !!(options && options.fatal);
    }
    get encoding() { return 'utf-8'; }
    decode(input) {
      let b;
      if (input === undefined) b = new Uint8Array(0);
      else if (input instanceof ArrayBuffer) b = new Uint8Array(input);
      else if (ArrayBuffer.isView(input)) b = new Uint8Array(input.buffer, input.byteOffset, input.byteLength);
      else throw new TypeError('TextDecoder.decode takes an ArrayBuffer or a view of one');
      const parts = [];
      let chunk = [];
      const bad = () => {
        if (this.fatal) throw new TypeError('the input is not valid UTF-8');
        chunk.push(0xfffd);
      };
      for (let i = 0; i < b.length;) {
        const c = b[i];
        let need = 0, cp = 0, min = 0;
        if (c < 0x80) { chunk.push(c); i++; continue; }
        else if (c >= 0xc2 && c <= 0xdf) { need = 1; cp = c & 31; min = 0x80; }
        else if (c >= 0xe0 && c <= 0xef) { need = 2; cp = c & 15; min = 0x800; }
        else if (c >= 0xf0 && c <= 0xf4) { need = 3; cp = c & 7; min = 0x10000; }
        else { bad(); i++; continue; }
        let j = 1;
        for (; j <= need; j++) {
          const d = b[i + j];
          if (d === undefined || (d & 0xc0) !== 0x80) break;
          cp = (cp << 6) | (d & 63);
        }
        if (j <= need || cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) { bad(); i += Math.max(1, j); continue; }
        chunk.push(cp);
        i += need + 1;
        if (chunk.length >= 4096) { parts.push(String.fromCodePoint(...chunk)); chunk = []; }
      }
      parts.push(String.fromCodePoint(...chunk));
      return parts.join('');
    }
  }
  G.TextEncoder = TextEncoder;
  G.TextDecoder = TextDecoder;

  function toJson(v) {
    const s = JSON.stringify(v);
    return s === undefined ? 'null' : s;
  }

  const pending = new Map();

  // Issues an effect now (so effects are numbered in the order the script
  // issues them) and answers its id and the promise of its result. The
  // error made here carries the script's stack at the point of the call.
  function issue(kind, payload) {
    const site = new Error('effect');
    let id;
    const promise = new Promise((resolve, reject) => {
      id = effect(kind, toJson(payload));
      pending.set(id, { resolve, reject, site });
    });
    return { id, promise };
  }

  function deliver(id, ok, text, code, message, tool, callSeq) {
    const p = pending.get(id);
    if (!p) return;
    pending.delete(id);
    if (ok) {
      p.resolve(JSON.parse(text));
      return;
    }
    const e = new Error(message);
    e.code = code;
    if (tool !== undefined) e.tool = tool;
    e.callSeq = callSeq;
    const frames = String(p.site.stack || '').split('\n').filter((l) => l.includes('workflow.js'));
    e.stack = frames.join('\n');
    p.reject(e);
  }

  function thunk(x) {
    return typeof x === 'function' ? (async () => x())() : x;
  }

  function start(main, inputText, runId) {
    const input = JSON.parse(inputText);
    const ctx = Object.freeze({
      input,
      runId,
      call(tool, toolInput, options) {
        if (typeof tool !== 'string' || tool === '') throw new TypeError('ctx.call(tool, input): tool must be a non-empty string');
        const description = options && typeof options.description === 'string' ? options.description : undefined;
        return issue('call', { tool, input: toolInput === undefined ? null : toolInput, description }).promise;
      },
      delegate(spec) {
        return issue('delegate', { spec: spec === undefined ? null : spec }).promise;
      },
      parallel(items) {
        if (!Array.isArray(items)) throw new TypeError('ctx.parallel takes an array of promises or functions');
        return Promise.all(items.map(thunk));
      },
      parallelSettled(items) {
        if (!Array.isArray(items)) throw new TypeError('ctx.parallelSettled takes an array of promises or functions');
        return Promise.allSettled(items.map(thunk));
      },
      async sleep(ms) {
        if (typeof ms !== 'number' || !Number.isFinite(ms)) throw new TypeError('ctx.sleep(ms): ms must be a finite number');
        await issue('sleep', { ms }).promise;
      },
      minutes(n) { return n * 60000; },
      hours(n) { return n * 3600000; },
      waitForEvent(match, options) {
        const o = options || {};
        if (o.timeoutMs !== undefined && (typeof o.timeoutMs !== 'number' || !Number.isFinite(o.timeoutMs))) {
          throw new TypeError('ctx.waitForEvent: timeoutMs must be a finite number');
        }
        return issue('wait', {
          match: match === undefined || match === null ? {} : match,
          timeoutMs: o.timeoutMs,
          label: o.label === undefined ? undefined : String(o.label),
        }).promise;
      },
      continueAsNew(state) {
        return issue('continueAsNew', { state: state === undefined ? null : state }).promise;
      },
      async step(label, fn) {
        if (typeof label !== 'string' || label === '') throw new TypeError('ctx.step(label, fn): label must be a non-empty string');
        if (typeof fn !== 'function') throw new TypeError('ctx.step(label, fn): fn must be a function');
        const started = issue('stepStart', { label });
        const r = await started.promise;
        if (r.done) return r.value;
        const value = await fn();
        return issue('stepEnd', { step: started.id, value: value === undefined ? null : value }).promise;
      },
      async plan(plan) {
        await issue('plan', { plan: plan === undefined ? null : plan }).promise;
      },
      now() {
        return issue('now', {}).promise;
      },
      log(level, message) {
        if (message === undefined) { message = level; level = 'info'; }
        log(String(level), typeof message === 'string' ? message : toJson(message));
      },
      progress(fraction, label) {
        progress(typeof fraction === 'number' ? fraction : undefined, label === undefined || label === null ? undefined : String(label));
      },
    });
    return (async () => main(input, ctx))();
  }

  function isAsyncFunction(f) {
    return typeof f === 'function' && Object.getPrototypeOf(f) === AsyncFunctionProto;
  }

  return { deliver, start, isAsyncFunction, toJson };
})
