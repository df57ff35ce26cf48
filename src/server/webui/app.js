// Shared by the page's scripts: the API key (kept in this browser), fetch with it, and a reader
// for Server-Sent Events over fetch (EventSource cannot send an Authorization header).
'use strict';

const KEY_NAME = 'peregrine_api_key';

function apiKey() { return localStorage.getItem(KEY_NAME) || ''; }

function setApiKey(key) {
  if (key) {
    localStorage.setItem(KEY_NAME, key);
    document.cookie = KEY_NAME + '=' + encodeURIComponent(key) + '; path=/; SameSite=Strict';
  } else {
    localStorage.removeItem(KEY_NAME);
    document.cookie = KEY_NAME + '=; path=/; SameSite=Strict; max-age=0';
  }
}

function apiFetch(path, options = {}) {
  const headers = Object.assign({}, options.headers || {});
  if (apiKey()) headers.Authorization = 'Bearer ' + apiKey();
  if (options.body && !headers['Content-Type']) headers['Content-Type'] = 'application/json';
  return fetch(path, Object.assign({}, options, { headers }));
}

// The error message of a failed response (OpenAI's {"error": {"message": ...}} shape).
async function errorText(response) {
  try {
    const body = await response.json();
    return (body.error && body.error.message) || JSON.stringify(body);
  } catch (e) {
    return response.status + ' ' + response.statusText;
  }
}

// Calls onEvent(eventName, dataText) for every complete event of a text/event-stream response.
async function readEvents(response, onEvent) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += decoder.decode(value, { stream: true });
    let end;
    while ((end = buffer.indexOf('\n\n')) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      let name = 'message';
      const data = [];
      for (const line of block.split('\n')) {
        if (line.startsWith('event:')) name = line.slice(6).trim();
        else if (line.startsWith('data:')) data.push(line.slice(5).replace(/^ /, ''));
      }
      if (data.length) onEvent(name, data.join('\n'));
    }
  }
}

document.getElementById('key-button').addEventListener('click', () => {
  const key = prompt('API key for this server (empty: none). It is kept in this browser only.', apiKey());
  if (key === null) return;
  setApiKey(key.trim());
  location.reload();
});
