// burble live captions page: microphone -> AudioWorklet (16 kHz PCM) -> WebSocket -> captions.
// Protocol: docs/protocol.md (version 1). No dependencies, no build step.
'use strict';

const PROTOCOL_VERSION = 1;
const TARGET_RATE = 16000;
const FRAME_SAMPLES = 1600;  // 100 ms per WebSocket message

const $ = (id) => document.getElementById(id);
const ui = {
  start: $('start'), stop: $('stop'), status: $('status'), error: $('error'),
  captions: $('captions'), token: $('token'), level: $('level'),
};

let session = null;  // {ws, ctx, stream, node, segments: Map}

function setStatus(text) { ui.status.textContent = text; }

function showError(text) {
  ui.error.textContent = text;
  ui.error.hidden = !text;
}

function socketUrl() {
  const params = new URLSearchParams(location.search);
  const base = params.get('server') && /^wss?:\/\//.test(params.get('server'))
    ? params.get('server')
    : `${location.protocol === 'https:' ? 'wss:' : 'ws:'}//${location.host}/ws`;
  const token = ui.token.value.trim();
  return token ? `${base}?token=${encodeURIComponent(token)}` : base;
}

// -------------------------------------------------------------------------------- captions
function segmentLine(id) {
  let line = session.segments.get(id);
  if (!line) {
    const p = document.createElement('p');
    p.className = 'segment';
    p.dataset.segment = String(id);
    const finalSpan = document.createElement('span');
    finalSpan.className = 'final';
    const partialSpan = document.createElement('span');
    partialSpan.className = 'partial';
    p.append(finalSpan, partialSpan);
    ui.captions.append(p);
    line = { p, finalSpan, partialSpan };
    session.segments.set(id, line);
  }
  return line;
}

function onEvent(event) {
  const line = segmentLine(event.segment_id);
  if (event.type === 'partial') {
    line.partialSpan.textContent = event.text;
  } else if (event.type === 'final') {
    line.finalSpan.textContent += event.text;
    line.partialSpan.textContent = '';
  } else if (event.type === 'endpoint') {
    // The endpoint repeats the whole committed utterance: make the line exactly that.
    line.finalSpan.textContent = event.text;
    line.partialSpan.textContent = '';
    line.p.classList.add('done');
  }
  line.p.scrollIntoView({ block: 'end' });
}

function onMessage(message) {
  let data;
  try { data = JSON.parse(message.data); } catch (e) { showError('the server sent something that is not JSON'); return; }
  switch (data.type) {
    case 'ready':
      setStatus(`listening (${data.model})`);
      if (data.unsupported && data.unsupported.length) showError(`the server ignores: ${data.unsupported.join(', ')}`);
      break;
    case 'partial': case 'final': case 'endpoint':
      onEvent(data);
      break;
    case 'error':
      showError(`${data.message} (${data.code})`);
      break;
    default:
      break;  // newer server message types are ignored
  }
}

// --------------------------------------------------------------------------------- capture
async function start() {
  showError('');
  ui.start.disabled = true;
  setStatus('opening the microphone…');
  const s = { segments: new Map(), pending: [], started: false, stopping: false };
  session = s;
  try {
    // The audio graph first, the microphone last: capture starts when getUserMedia resolves,
    // and everything it delivers before the graph is connected would be lost.
    s.ctx = new AudioContext();  // the device's rate; the worklet resamples to 16 kHz
    await s.ctx.audioWorklet.addModule('capture-worklet.js');
    s.node = new AudioWorkletNode(s.ctx, 'burble-capture', {
      processorOptions: { targetRate: TARGET_RATE, frameSamples: FRAME_SAMPLES },
    });
    s.node.port.onmessage = (e) => {
      ui.level.value = e.data.peak;
      if (s.started && s.ws.readyState === WebSocket.OPEN) s.ws.send(e.data.pcm);
      else if (!s.started && s.pending.length < 100) s.pending.push(e.data.pcm);  // until the socket opens
    };
    s.node.connect(s.ctx.destination);  // outputs silence; keeps the node pulled by the graph
    await s.ctx.resume();
    s.stream = await navigator.mediaDevices.getUserMedia({
      audio: { channelCount: 1, echoCancellation: false, noiseSuppression: false, autoGainControl: false },
    });
    s.ctx.createMediaStreamSource(s.stream).connect(s.node);
  } catch (e) {
    showError(`microphone unavailable: ${e.message || e}`);
    cleanupAudio(s);
    ui.start.disabled = false;
    setStatus('idle');
    session = null;
    return;
  }
  setStatus('connecting…');
  s.ws = new WebSocket(socketUrl());
  s.ws.binaryType = 'arraybuffer';
  s.ws.onopen = () => {
    s.ws.send(JSON.stringify({
      type: 'start', version: PROTOCOL_VERSION, sample_rate: TARGET_RATE, encoding: 'pcm_s16le',
      channels: 1, partials: true,
      // ?realtime=0: never drop audio when the server falls behind (captions lag instead).
      realtime: new URLSearchParams(location.search).get('realtime') !== '0',
    }));
    s.started = true;
    for (const pcm of s.pending) s.ws.send(pcm);  // audio captured while connecting
    s.pending = [];
    ui.stop.disabled = false;
  };
  s.ws.onmessage = onMessage;
  s.ws.onerror = () => { if (!s.stopping) showError('connection error (is the server running? is the token right?)'); };
  s.ws.onclose = (e) => {
    cleanupAudio(s);
    if (e.code !== 1000 && !ui.error.textContent) showError(`connection closed (code ${e.code}${e.reason ? ': ' + e.reason : ''})`);
    setStatus(e.code === 1000 ? 'stopped' : `closed (${e.code})`);
    ui.start.disabled = false;
    ui.stop.disabled = true;
    if (session === s) session = null;
  };
}

function stop() {
  const s = session;
  if (!s) return;
  s.stopping = true;
  ui.stop.disabled = true;
  setStatus('finishing…');
  if (s.node) s.node.port.postMessage('stop');  // sends the last partial frame
  // Give the worklet a moment to post its last frame, then ask for the final results.
  setTimeout(() => {
    cleanupAudio(s);
    if (s.ws && s.ws.readyState === WebSocket.OPEN) s.ws.send(JSON.stringify({ type: 'stop' }));
  }, 150);
}

function cleanupAudio(s) {
  if (s.stream) s.stream.getTracks().forEach((t) => t.stop());
  if (s.ctx && s.ctx.state !== 'closed') s.ctx.close();
  s.stream = null;
  s.ctx = null;
  ui.level.value = 0;
}

ui.token.value = new URLSearchParams(location.search).get('token') || '';
ui.start.addEventListener('click', start);
ui.stop.addEventListener('click', stop);
if (!window.AudioWorkletNode || !navigator.mediaDevices) {
  showError('this browser cannot capture audio here (needs AudioWorklet and a secure context: https or localhost)');
  ui.start.disabled = true;
}
document.body.dataset.ready = '1';  // the page is wired up (tests wait for this)
