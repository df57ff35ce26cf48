// The chat: streams /v1/chat/completions, stops with an abort, and shows on request the prompt
// the model's chat template made of the conversation (POST /v1/chat/render).
'use strict';

const chat = {
  model: null,
  history: [],        // {role, content} of the finished turns
  controller: null,   // aborts the stream in flight
  deltas: 0,          // content deltas received (the browser test reads it)
};
window.peregrineChat = chat;

const $ = (id) => document.getElementById(id);

function addMessage(role, text) {
  const div = document.createElement('div');
  div.className = 'msg ' + role;
  div.textContent = text;
  $('messages').appendChild(div);
  div.scrollIntoView({ block: 'end' });
  return div;
}

function conversation(userText) {
  const messages = [];
  const system = $('system').value.trim();
  if (system) messages.push({ role: 'system', content: system });
  messages.push(...chat.history);
  if (userText !== undefined) messages.push({ role: 'user', content: userText });
  return messages;
}

function numberField(id) {
  const v = Number($(id).value);
  return Number.isFinite(v) ? v : undefined;
}

async function loadModel() {
  const r = await apiFetch('/v1/models');
  if (!r.ok) throw new Error(await errorText(r));
  const body = await r.json();
  chat.model = body.data[0].id;
  $('model-name').textContent = chat.model;
}

// Renders run concurrently (ticking the box, then sending): only the latest one may write, or a
// slower earlier answer (an older conversation) would overwrite the newer prompt.
let renderSerial = 0;

async function showRenderedPrompt(messages) {
  const pre = $('rendered-prompt');
  const serial = ++renderSerial;
  if (!$('show-prompt').checked) { pre.hidden = true; return; }
  pre.hidden = false;
  const r = await apiFetch('/v1/chat/render', { method: 'POST', body: JSON.stringify({ model: chat.model, messages }) });
  if (serial !== renderSerial) return;
  if (!r.ok) { pre.textContent = 'render failed: ' + await errorText(r); return; }
  const body = await r.json();
  if (serial !== renderSerial) return;
  pre.textContent = body.prompt;
  pre.dataset.tokens = body.tokens;
  pre.title = body.tokens + ' tokens';
}

function setBusy(busy) {
  $('send').disabled = busy;
  $('stop').disabled = !busy;
}

async function send(text) {
  if (!chat.model) await loadModel();
  const messages = conversation(text);
  addMessage('user', text);
  const out = addMessage('assistant', '');
  const meta = document.createElement('span');
  meta.className = 'meta';
  showRenderedPrompt(messages).catch((e) => { $('rendered-prompt').textContent = String(e); });
  const request = {
    model: chat.model, messages, stream: true,
    temperature: numberField('temperature'), top_p: numberField('top-p'), max_tokens: numberField('max-tokens'),
    stream_options: { include_usage: true },
  };
  chat.controller = new AbortController();
  setBusy(true);
  $('chat-status').textContent = 'generating…';
  const started = performance.now();
  let firstTokenMs = null, reply = '', finish = null, usage = null;
  try {
    const r = await apiFetch('/v1/chat/completions', { method: 'POST', body: JSON.stringify(request), signal: chat.controller.signal });
    if (!r.ok) throw new Error(await errorText(r));
    await readEvents(r, (name, data) => {
      if (data === '[DONE]') return;
      const chunk = JSON.parse(data);
      if (chunk.usage) usage = chunk.usage;
      for (const choice of chunk.choices || []) {
        const piece = choice.delta && choice.delta.content;
        if (piece) {
          if (firstTokenMs === null) firstTokenMs = performance.now() - started;
          reply += piece;
          chat.deltas += 1;
          out.textContent = reply;
          out.scrollIntoView({ block: 'end' });
        }
        if (choice.finish_reason) finish = choice.finish_reason;
      }
    });
    chat.history.push({ role: 'user', content: text }, { role: 'assistant', content: reply });
  } catch (e) {
    if (e.name === 'AbortError') {
      finish = 'stopped';
      chat.history.push({ role: 'user', content: text }, { role: 'assistant', content: reply });
    } else {
      out.className = 'msg assistant error';
      out.textContent = reply + (reply ? '\n' : '') + 'error: ' + e.message;
    }
  } finally {
    chat.controller = null;
    setBusy(false);
    $('chat-status').textContent = '';
  }
  const parts = [];
  if (finish) parts.push(finish);
  if (usage) parts.push(usage.completion_tokens + ' tokens');
  if (firstTokenMs !== null) parts.push('first token ' + firstTokenMs.toFixed(0) + ' ms');
  meta.textContent = parts.join(' · ');
  out.appendChild(meta);
}

$('composer').addEventListener('submit', (e) => {
  e.preventDefault();
  const text = $('input').value;
  if (!text.trim() || chat.controller) return;
  $('input').value = '';
  send(text);
});
$('input').addEventListener('keydown', (e) => {
  if (e.key === 'Enter' && !e.shiftKey) { e.preventDefault(); $('composer').requestSubmit(); }
});
$('stop').addEventListener('click', () => { if (chat.controller) chat.controller.abort(); });
$('clear').addEventListener('click', () => { chat.history = []; $('messages').textContent = ''; });
$('show-prompt').addEventListener('change', () => {
  if ($('show-prompt').checked) showRenderedPrompt(conversation()).catch(() => {});
  else $('rendered-prompt').hidden = true;
});
loadModel().catch((e) => { $('chat-status').textContent = 'model: ' + e.message; });
