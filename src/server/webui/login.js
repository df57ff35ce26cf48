// The login form: the key goes to the server once (POST /webui/login), which answers with an
// HttpOnly session cookie; the page never stores the key, so no script can read it back.
'use strict';

document.getElementById('login').addEventListener('submit', async (e) => {
  e.preventDefault();
  const key = document.getElementById('key').value;
  const shown = document.getElementById('login-error');
  const r = await fetch('/webui/login', { method: 'POST', headers: { Authorization: 'Bearer ' + key } });
  if (r.ok) {
    location.reload();
    return;
  }
  shown.textContent = r.status === 401 ? 'That is not the key.' : 'The server answered ' + r.status + '.';
  shown.hidden = false;
});
