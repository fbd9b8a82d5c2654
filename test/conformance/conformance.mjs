// Conformance: the official WeCom Node SDK (@wecom/aibot-node-sdk) against
// botctl's simulator. Usage: node conformance.mjs ws://127.0.0.1:PORT/
// Prints one line per check and "N passed, N failed" at the end; exits 1 on
// any failure.
import { WSClient } from '@wecom/aibot-node-sdk';
import { runReplies } from './replies.mjs';

const wsUrl = process.argv[2];
if (!wsUrl) {
  console.error('usage: node conformance.mjs ws://HOST:PORT/');
  process.exit(2);
}
const base = wsUrl.replace(/^ws/, 'http').replace(/\/$/, '');
const BOT = process.env.CONF_BOT || 'conf-bot';
const SECRET = process.env.CONF_SECRET || 'conf-secret';

let passed = 0;
let failed = 0;
function check(name, ok, detail = '') {
  if (ok) {
    passed++;
    console.log(`ok   ${name}`);
  } else {
    failed++;
    console.log(`FAIL ${name}${detail ? ': ' + detail : ''}`);
  }
}

const quiet = { debug() {}, info() {}, warn() {}, error() {} };

async function control(method, path, body) {
  const res = await fetch(base + path, {
    method,
    headers: { 'content-type': 'application/json' },
    body: body ? JSON.stringify(body) : undefined,
  });
  const json = await res.json();
  if (!res.ok) throw new Error(`${method} ${path}: ${res.status} ${JSON.stringify(json)}`);
  return json;
}

// waitFor resolves with the first emission of event on emitter, or rejects
// after ms (generous: this runs on loaded CI machines).
function waitFor(emitter, event, ms = 15000) {
  return new Promise((resolve, reject) => {
    const t = setTimeout(() => reject(new Error(`timed out waiting for ${event}`)), ms);
    emitter.once(event, (v) => {
      clearTimeout(t);
      resolve(v);
    });
  });
}

function client(secret = SECRET) {
  return new WSClient({
    botId: BOT,
    secret,
    wsUrl,
    logger: quiet,
    maxReconnectAttempts: 0,
    maxAuthFailureAttempts: 1,
    heartbeatInterval: 1000,
  });
}

async function main() {
  // 1. Authenticate.
  const a = client();
  const authed = waitFor(a, 'authenticated');
  a.connect();
  await authed;
  check('SDK authenticates against the simulator', true);

  // 2. Receive a message sent through the control API.
  const gotMsg = waitFor(a, 'message.text');
  const sent = await control('POST', '/control/messages', {
    bot_id: BOT, user_id: 'alice', text: 'hello from conformance', chat_type: 'single',
  });
  check('control API reports the message delivered', sent.delivered === true, JSON.stringify(sent));
  const frame = await gotMsg;
  check('SDK receives aibot_msg_callback with the text',
    frame.body?.text?.content === 'hello from conformance' && frame.body?.msgid === sent.msgid,
    JSON.stringify(frame.body));

  // 2b. Media: the SDK's own downloadFile (AES-256-CBC, IV = key[:16],
  // PKCS#7 to 32 bytes) decrypts what the simulator serves, for sizes on
  // both sides of a 32-byte boundary, and reads the name.
  for (const [kind, size] of [['image', 45], ['file', 32], ['file', 33], ['video', 1]]) {
    const data = Buffer.alloc(size, 0).map((_, i) => (i * 7 + size) & 0xff);
    const got = waitFor(a, `message.${kind}`);
    await control('POST', '/control/messages', {
      bot_id: BOT, user_id: 'carol', msgtype: kind, content_base64: data.toString('base64'), filename: `名字 ${size}.bin`,
    });
    const f = await got;
    const item = f.body?.[kind];
    let dl = null;
    let err = '';
    try {
      dl = await a.downloadFile(item?.url, item?.aeskey);
    } catch (e) {
      err = String(e?.message || e);
    }
    check(`SDK downloadFile decrypts a ${size}-byte ${kind} to the bytes sent, with its name`,
      dl && Buffer.compare(dl.buffer, data) === 0 && dl.filename === `名字 ${size}.bin`,
      err || `${dl?.buffer?.length} bytes, name ${dl?.filename}`);
  }
  const gotMixed = waitFor(a, 'message.mixed');
  await control('POST', '/control/messages', {
    bot_id: BOT, user_id: 'carol', msgtype: 'mixed',
    items: [{ msgtype: 'text', text: 'look' }, { msgtype: 'image', width: 8, height: 8 }],
    quote: { msgtype: 'file', content_base64: Buffer.from('quoted').toString('base64'), filename: 'q.txt' },
  });
  const mf = await gotMixed;
  const items = mf.body?.mixed?.msg_item || [];
  const q = mf.body?.quote;
  let mixedOK = false;
  try {
    const img = await a.downloadFile(items[1]?.image?.url, items[1]?.image?.aeskey);
    const qf = await a.downloadFile(q?.file?.url, q?.file?.aeskey);
    mixedOK = items[0]?.text?.content === 'look' && img.buffer.subarray(1, 4).toString() === 'PNG' &&
      q?.msgtype === 'file' && qf.buffer.toString() === 'quoted';
  } catch (e) {
    mixedOK = false;
  }
  check('mixed message with a quoted file: text, image and quote decrypt with the SDK', mixedOK, JSON.stringify(mf.body));

  // 3. Stream a reply: two updates, then finish.
  const streamId = 'conf-stream-1';
  await a.replyStream(frame, streamId, 'partial…', false);
  await a.replyStream(frame, streamId, 'partial… and the whole answer', true);
  check('stream frames acked (errcode 0)', true);

  // 4. The transcript shows the user message and one finished stream.
  const tr = await control('GET', `/control/transcript?bot_id=${BOT}&chat=alice`);
  const user = tr.messages.find((m) => m.from === 'user');
  const bot = tr.messages.filter((m) => m.from === 'bot');
  check('transcript has the user message with its seq',
    user && user.msgid === sent.msgid && user.seq === sent.seq, JSON.stringify(tr));
  check('transcript shows the stream once, finished, with the latest content',
    bot.length === 1 && bot[0].content === 'partial… and the whole answer' && bot[0].finished === true &&
    bot[0].reply_to === sent.msgid, JSON.stringify(bot));

  // 5. Proactive push (markdown) to the chat that talked to the bot.
  await a.sendMessage('alice', { msgtype: 'markdown', markdown: { content: '**pushed**' } });
  const tr2 = await control('GET', `/control/transcript?bot_id=${BOT}&chat=alice`);
  check('proactive markdown push appears in the transcript',
    tr2.messages.some((m) => m.from === 'bot' && m.kind === 'markdown' && m.content === '**pushed**'),
    JSON.stringify(tr2));

  // 6. A plain text push is refused (40008).
  let code = null;
  try {
    await a.sendMessage('alice', { msgtype: 'text', text: { content: 'plain' } });
  } catch (f) {
    code = f?.errcode ?? null;
  }
  check('aibot_send_msg with msgtype text is refused with 40008', code === 40008, `errcode ${code}`);

  // 6b. Media uploads and sends, msg_item images, template cards, the
  // welcome card and a card update (replies.mjs).
  await runReplies({ a, BOT, control, check, waitFor });

  // 7. A second SDK client on the same bot kicks the first.
  const before = await control('GET', `/control/stats?bot_id=${BOT}`);
  const b = client();
  const kicked = waitFor(a, 'event.disconnected_event');
  const bAuthed = waitFor(b, 'authenticated');
  b.connect();
  await bAuthed;
  await kicked;
  check('second client authenticates; first receives disconnected_event', true);
  const after = await control('GET', `/control/stats?bot_id=${BOT}`);
  check('simulator counts one kick', after.kicks === before.kicks + 1, `kicks ${before.kicks} -> ${after.kicks}`);

  // 8. Messages now reach the second client only.
  const gotB = waitFor(b, 'message.text');
  let aGot = false;
  a.on('message.text', () => { aGot = true; });
  await control('POST', '/control/messages', { bot_id: BOT, user_id: 'bob', text: 'after the kick' });
  const fb = await gotB;
  check('after the kick, callbacks reach the new connection', fb.body?.text?.content === 'after the kick');
  check('the kicked connection receives nothing more', aGot === false);

  // 9. The heartbeat (ping) is acked: the SDK stays up across several intervals.
  await new Promise((r) => setTimeout(r, 3500));
  const st = await control('GET', `/control/stats?bot_id=${BOT}`);
  check('SDK pings are counted and acked (connection still live)', (st.frames?.ping ?? 0) >= 2 && st.connected !== false,
    JSON.stringify(st));

  // 10. A wrong secret is refused.
  const bad = client('wrong-secret');
  const err = waitFor(bad, 'error');
  bad.connect();
  const e = await err;
  check('wrong secret: authentication fails', /Authentication failed/.test(String(e?.message)), String(e?.message));
  bad.disconnect();

  b.disconnect();
  a.disconnect();
}

try {
  await main();
} catch (e) {
  failed++;
  console.log(`FAIL ${e?.stack || e}`);
}
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
