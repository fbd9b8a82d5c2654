// Conformance of what a bot sends beyond text: the official SDK, as the
// bot, uploads media with its own chunked upload and sends it (a reply and a
// proactive push, one file of more than 10 chunks), finishes a stream with
// msg_item images, replies with template cards (template_card and
// stream_with_template_card), answers enter_chat with a welcome card and a
// template_card_event with a card update. Every outcome is checked from the
// simulator's side: its transcript shows what the user would see.
import { createHash } from 'node:crypto';
import { deflateSync } from 'node:zlib';

const md5 = (buf) => createHash('md5').update(buf).digest('hex');

// crc32 for PNG chunks (node 20 has no zlib.crc32).
const crcTable = Array.from({ length: 256 }, (_, n) => {
  let c = n;
  for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
  return c >>> 0;
});
function crc32(buf) {
  let c = 0xffffffff;
  for (const b of buf) c = crcTable[(c ^ b) & 0xff] ^ (c >>> 8);
  return (c ^ 0xffffffff) >>> 0;
}

// png is a real w×h PNG of one colour: what a bot would send as an image.
export function png(w, h, [r, g, bl], noise = false) {
  const chunk = (type, data) => {
    const len = Buffer.alloc(4);
    len.writeUInt32BE(data.length);
    const td = Buffer.concat([Buffer.from(type), data]);
    const crc = Buffer.alloc(4);
    crc.writeUInt32BE(crc32(td));
    return Buffer.concat([len, td, crc]);
  };
  const ihdr = Buffer.alloc(13);
  ihdr.writeUInt32BE(w, 0);
  ihdr.writeUInt32BE(h, 4);
  ihdr[8] = 8; // bit depth
  ihdr[9] = 2; // truecolour
  const row = Buffer.concat([Buffer.from([0]), Buffer.from(Array.from({ length: w }, () => [r, g, bl]).flat())]);
  const raw = Buffer.concat(Array.from({ length: h }, () => row));
  if (noise) { // pixels that do not compress: a PNG of about w×h×3 bytes
    let x = 2463534242;
    for (let i = 0; i < raw.length; i++) {
      if (i % (w * 3 + 1) === 0) continue; // each row's filter byte stays 0
      x ^= x << 13; x ^= x >>> 17; x ^= x << 5;
      raw[i] = x & 0xff;
    }
  }
  return Buffer.concat([
    Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]),
    chunk('IHDR', ihdr), chunk('IDAT', deflateSync(raw)), chunk('IEND', Buffer.alloc(0)),
  ]);
}

// card is a template card as a bot would send it.
function card(cardType, taskID, title, extra = {}) {
  return { card_type: cardType, main_title: { title, desc: 'conformance' }, task_id: taskID, ...extra };
}

const buttons = (taskID, title) => card('button_interaction', taskID, title, {
  button_list: [{ text: 'Yes', style: 1, key: 'yes' }, { text: 'No', style: 2, key: 'no' }],
});

function parse(s) {
  try {
    return JSON.parse(s);
  } catch {
    return null;
  }
}

// runReplies runs the scenarios on client a (subscribed as bot BOT).
export async function runReplies({ a, BOT, control, check, waitFor }) {
  const transcript = async (chat) => (await control('GET', `/control/transcript?bot_id=${BOT}&chat=${chat}`)).messages;
  const botEntries = async (chat) => (await transcript(chat)).filter((m) => m.from === 'bot');
  // ask plays user asking the bot and resolves with the callback frame the
  // SDK got, and the control API's result.
  const ask = async (user, text) => {
    const got = waitFor(a, 'message.text');
    const sent = await control('POST', '/control/messages', { bot_id: BOT, user_id: user, text });
    const frame = await got;
    if (frame.body?.msgid !== sent.msgid) throw new Error(`expected the callback of ${sent.msgid}, got ${frame.body?.msgid}`);
    return { frame, sent };
  };
  const tryIt = async (fn) => {
    try {
      return { value: await fn() };
    } catch (e) {
      return { err: e?.errcode !== undefined ? `errcode ${e.errcode}: ${e.errmsg}` : String(e?.message || e) };
    }
  };

  // (a) Media: the SDK's uploadMedia (aibot_upload_media_init, _chunk ×N,
  // _finish), then replyMedia / sendMediaMessage with the media_id.
  {
    const img = png(64, 48, [200, 30, 30]);
    const { frame, sent } = await ask('dave', 'send me a picture');
    const up = await tryIt(() => a.uploadMedia(img, { type: 'image', filename: 'red.png' }));
    check('uploadMedia: a one-chunk image returns a media_id', up.value?.media_id && up.value.type === 'image',
      up.err || JSON.stringify(up.value));
    const rep = await tryIt(() => a.replyMedia(frame, 'image', up.value?.media_id));
    const e = (await botEntries('dave')).find((m) => m.kind === 'image');
    check('replyMedia image: acked, and the transcript shows the uploaded image as the reply',
      !rep.err && e && e.content === up.value?.media_id && e.reply_to === sent.msgid &&
      e.upload?.type === 'image' && e.upload?.filename === 'red.png' && e.upload?.size === img.length && e.upload?.md5 === md5(img),
      rep.err || JSON.stringify(e));

    // A file of 11 chunks (the SDK's chunk is 512 KB; it uploads more than
    // 10 chunks two at a time), pushed proactively.
    const big = Buffer.alloc(10 * 512 * 1024 + 123457);
    for (let i = 0; i < big.length; i++) big[i] = (i * 31 + (i >> 9)) & 0xff;
    const bigUp = await tryIt(() => a.uploadMedia(big, { type: 'file', filename: '报告 11 chunks.bin' }));
    check('uploadMedia: an 11-chunk file (5.1 MB) returns a media_id', bigUp.value?.media_id && bigUp.value.type === 'file',
      bigUp.err || JSON.stringify(bigUp.value));
    const push = await tryIt(() => a.sendMediaMessage('dave', 'file', bigUp.value?.media_id));
    const pe = (await botEntries('dave')).find((m) => m.kind === 'file');
    check('sendMediaMessage file: acked, and the transcript shows the 11-chunk file, reassembled',
      !push.err && pe && pe.content === bigUp.value?.media_id && pe.reply_to === '' &&
      pe.upload?.size === big.length && pe.upload?.md5 === md5(big) && pe.upload?.filename === '报告 11 chunks.bin',
      push.err || JSON.stringify(pe));

    // A video with a title and a description, as a reply.
    const vid = Buffer.from('not really a video, but bytes all the same');
    const { frame: vf } = await ask('dave', 'and a video');
    const vUp = await tryIt(() => a.uploadMedia(vid, { type: 'video', filename: 'clip.mp4' }));
    const vRep = await tryIt(() => a.replyMedia(vf, 'video', vUp.value?.media_id, { title: 'A clip', description: 'for conformance' }));
    const ve = (await botEntries('dave')).find((m) => m.kind === 'video');
    check('replyMedia video with title and description: acked and shown',
      !vUp.err && !vRep.err && ve && ve.content === vUp.value?.media_id && ve.upload?.md5 === md5(vid),
      vUp.err || vRep.err || JSON.stringify(ve));

    // A media_id the simulator never issued is refused.
    const bogus = await tryIt(() => a.sendMediaMessage('dave', 'image', 'media_never_uploaded'));
    check('sendMediaMessage with an unknown media_id is refused', !!bogus.err, JSON.stringify(bogus));
  }

  // (b) A finishing stream frame with msg_item images (base64 + md5).
  {
    const imgs = [png(16, 16, [0, 128, 255]), png(32, 8, [0, 200, 0])];
    const items = imgs.map((b) => ({ msgtype: 'image', image: { base64: b.toString('base64'), md5: md5(b) } }));
    const { frame, sent } = await ask('erin', 'draw two things');
    const r1 = await tryIt(() => a.replyStream(frame, 'conf-img-stream', 'drawing…', false));
    const r2 = await tryIt(() => a.replyStream(frame, 'conf-img-stream', 'here they are', true, items));
    const e = (await botEntries('erin')).find((m) => m.stream_id === 'conf-img-stream');
    check('replyStream finish with two msg_item images: acked; the transcript shows both images',
      !r1.err && !r2.err && e && e.finished && e.content === 'here they are' && e.reply_to === sent.msgid &&
      e.images === 2 && JSON.stringify(e.image_md5) === JSON.stringify(imgs.map(md5)),
      r1.err || r2.err || JSON.stringify(e));

    // A 2 MB image (the frame is over 2.7 MB: the SDK allows 10 MB an image).
    const large = png(820, 860, [0, 0, 0], true);
    const { frame: fl } = await ask('erin', 'a large one');
    const rl = await tryIt(() => a.replyStream(fl, 'conf-img-large', 'large', true,
      [{ msgtype: 'image', image: { base64: large.toString('base64'), md5: md5(large) } }]));
    const el = (await botEntries('erin')).find((m) => m.stream_id === 'conf-img-large');
    check(`a finishing frame with a ${(large.length / 1e6).toFixed(1)} MB PNG is accepted and shown`,
      !rl.err && el?.finished && el.image_md5?.[0] === md5(large), rl.err || JSON.stringify(el));

    // An image whose md5 does not match its bytes is refused.
    const { frame: f2 } = await ask('erin', 'one more');
    const bad = await tryIt(() => a.replyStream(f2, 'conf-img-bad', 'oops', true,
      [{ msgtype: 'image', image: { base64: imgs[0].toString('base64'), md5: md5(imgs[1]) } }]));
    check('a msg_item image whose md5 is not its bytes\' is refused', !!bad.err, JSON.stringify(bad));
  }

  // (c) Template cards.
  {
    // template_card as the reply to a message.
    const { frame, sent } = await ask('frank', 'give me a card');
    const c1 = buttons('conf_task_reply', 'Proceed?');
    const r = await tryIt(() => a.replyTemplateCard(frame, c1, { id: 'conf-fb-card' }));
    const e = (await botEntries('frank')).find((m) => m.kind === 'template_card');
    const shown = parse(e?.content);
    check('replyTemplateCard: acked; the transcript shows the card with its task_id and buttons',
      !r.err && e && e.reply_to === sent.msgid && shown?.task_id === 'conf_task_reply' &&
      shown?.card_type === 'button_interaction' && shown?.button_list?.length === 2 && shown?.feedback?.id === 'conf-fb-card',
      r.err || JSON.stringify(e));

    // stream_with_template_card: the stream first, the card on a later
    // frame (the SDK: "template_card 可首次回复，也可在后续回复中发送").
    const { frame: f2, sent: s2 } = await ask('frank', 'stream and a card');
    const c2 = card('text_notice', 'conf_task_stream', 'Done', { card_action: { type: 1, url: 'https://example.com' } });
    const s1 = await tryIt(() => a.replyStreamWithCard(f2, 'conf-card-stream', 'working…', false));
    const s3 = await tryIt(() => a.replyStreamWithCard(f2, 'conf-card-stream', 'all done', true, { templateCard: c2 }));
    const se = (await botEntries('frank')).find((m) => m.stream_id === 'conf-card-stream');
    check('replyStreamWithCard: a first frame without the card and a finishing one with it are acked',
      !s1.err && !s3.err, s1.err || s3.err);
    check('stream_with_template_card: the transcript shows the finished stream and its card',
      se && se.kind === 'stream_with_template_card' && se.finished && se.content === 'all done' && se.reply_to === s2.msgid &&
      parse(se.card)?.task_id === 'conf_task_stream', JSON.stringify(se));

    // The card both on the first frame and with a stream in one frame.
    const { frame: f3 } = await ask('frank', 'card at once');
    const s4 = await tryIt(() => a.replyStreamWithCard(f3, 'conf-card-stream-2', 'here', true,
      { templateCard: card('text_notice', 'conf_task_stream_2', 'Now') }));
    const se2 = (await botEntries('frank')).find((m) => m.stream_id === 'conf-card-stream-2');
    check('replyStreamWithCard with the card on its only (finishing) frame: shown',
      !s4.err && se2?.finished && parse(se2?.card)?.task_id === 'conf_task_stream_2', s4.err || JSON.stringify(se2));

    // A proactive template card.
    const pc = await tryIt(() => a.sendMessage('frank', { msgtype: 'template_card', template_card: card('text_notice', 'conf_task_push', 'Pushed') }));
    const pe = (await botEntries('frank')).find((m) => m.kind === 'template_card' && m.reply_to === '');
    check('sendMessage template_card: acked and shown as a push', !pc.err && parse(pe?.content)?.task_id === 'conf_task_push',
      pc.err || JSON.stringify(pe));

    // A welcome card on enter_chat (within 5 s, on the event's req_id).
    const gotEnter = waitFor(a, 'event.enter_chat');
    const ev = await control('POST', '/control/events', { bot_id: BOT, user_id: 'gina', eventtype: 'enter_chat' });
    const ef = await gotEnter;
    check('SDK receives enter_chat with the event\'s msgid and the user',
      ef.body?.msgid === ev.msgid && ef.body?.event?.eventtype === 'enter_chat' && ef.body?.from?.userid === 'gina' &&
      ef.headers?.req_id === ev.req_id, JSON.stringify(ef.body));
    const w = await tryIt(() => a.replyWelcome(ef, { msgtype: 'template_card', template_card: buttons('conf_task_welcome', 'Welcome') }));
    const we = (await botEntries('gina')).find((m) => m.kind === 'welcome');
    check('replyWelcome with a template card: acked; the transcript shows the welcome card',
      !w.err && we?.reply_to === ev.msgid && parse(we?.content)?.task_id === 'conf_task_welcome', w.err || JSON.stringify(we));
    const w2 = await tryIt(() => a.replyWelcome(ef, { msgtype: 'text', text: { content: 'again' } }));
    check('a second welcome for the same enter_chat is refused', !!w2.err, JSON.stringify(w2));

    // A click on the welcome card's button: template_card_event, answered
    // with aibot_respond_update_msg (same task_id).
    const gotClick = waitFor(a, 'event.template_card_event');
    const ce = await control('POST', '/control/events', {
      bot_id: BOT, user_id: 'gina', eventtype: 'template_card_event', event_key: 'yes', task_id: 'conf_task_welcome',
    });
    const cf = await gotClick;
    check('SDK receives template_card_event with the event_key and task_id in event.template_card_event',
      cf.body?.event?.eventtype === 'template_card_event' && cf.body?.event?.template_card_event?.event_key === 'yes' &&
      cf.body?.event?.template_card_event?.task_id === 'conf_task_welcome', JSON.stringify(cf.body));
    const wrong = await tryIt(() => a.updateTemplateCard(cf, buttons('conf_task_other', 'Wrong card')));
    check('an update whose task_id is not the clicked card\'s is refused', !!wrong.err, JSON.stringify(wrong));
    const upd = buttons('conf_task_welcome', 'You said yes');
    upd.button_list = [{ text: 'Yes ✓', style: 1, key: 'yes' }];
    const u = await tryIt(() => a.updateTemplateCard(cf, upd, ['gina']));
    const ue = (await botEntries('gina')).find((m) => m.kind === 'update_template_card');
    check('updateTemplateCard: acked; the transcript shows the updated card for the click',
      !u.err && ue?.reply_to === ce.msgid && parse(ue?.content)?.main_title?.title === 'You said yes' &&
      JSON.stringify(ue?.userids) === '["gina"]', u.err || JSON.stringify(ue));
    const u2 = await tryIt(() => a.updateTemplateCard(cf, upd));
    check('a second update for the same click is refused', !!u2.err, JSON.stringify(u2));
  }
}
