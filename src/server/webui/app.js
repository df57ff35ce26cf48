// Shared by the page's scripts: fetch for this server, and a reader for Server-Sent Events over
// fetch. When the server has an API key the page holds no key: the login form exchanged it for
// an HttpOnly session cookie, which the browser sends with the page's own requests.
'use strict';

// An old page kept the key in this browser; it is not needed any more.
localStorage.removeItem('peregrine_api_key');

function apiFetch(path, options = {}) {
  const headers = Object.assign({}, options.headers || {});
  if (options.body && !headers['Content-Type']) headers['Content-Type'] = 'application/json';
  return fetch(path, Object.assign({}, options, { headers, credentials: 'same-origin' }));
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

// Logging out ends the session (the login page comes back when the server has a key).
document.getElementById('key-button').addEventListener('click', async () => {
  await fetch('/webui/logout', { method: 'POST', credentials: 'same-origin' });
  location.reload();
});
