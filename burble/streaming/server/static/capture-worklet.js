// burble capture worklet: microphone audio at the context's rate -> 16 kHz 16-bit PCM frames.
//
// Runs on the audio rendering thread. Each 128-sample render quantum is down-mixed to mono and
// resampled with a windowed-sinc low-pass interpolator (the anti-aliasing filter a plain
// decimation would lack), then packed into Int16 frames of `frameSamples` samples and posted
// (transferred, not copied) to the page, which sends them over the WebSocket.

const ZERO_CROSSINGS = 8;     // filter half-width in zero crossings of the cutoff
const TABLE_STEPS = 512;      // kernel samples per input sample (linear interpolation between)

class BurbleCapture extends AudioWorkletProcessor {
  constructor(options) {
    super();
    const o = (options && options.processorOptions) || {};
    this.outRate = o.targetRate || 16000;
    this.frameSamples = o.frameSamples || 1600;
    this.ratio = sampleRate / this.outRate;                       // input samples per output sample
    this.cutoff = Math.min(1, this.outRate / sampleRate) * 0.92;  // of the input Nyquist frequency
    this.half = Math.ceil(ZERO_CROSSINGS / this.cutoff);          // taps each side, input samples
    this.table = this.makeKernel();
    // Input history: buf[0] is absolute input index bufStart; start with `half` zeros of context.
    this.buf = new Float32Array(4096);
    this.bufLen = this.half;
    this.bufStart = -this.half;
    this.pos = 0;                                                 // next output time, input index
    this.frame = new Int16Array(this.frameSamples);
    this.fill = 0;
    this.peak = 0;
    this.running = true;
    this.port.onmessage = (event) => {
      if (event.data === 'flush') { this.postFrame(true); }
      if (event.data === 'stop') { this.postFrame(true); this.running = false; }
    };
  }

  makeKernel() {
    const n = this.half * TABLE_STEPS + 2;
    const table = new Float32Array(n);
    for (let i = 0; i < n; i++) {
      const d = i / TABLE_STEPS;                                  // distance in input samples
      const x = this.cutoff * d;
      const sinc = x === 0 ? 1 : Math.sin(Math.PI * x) / (Math.PI * x);
      const w = d >= this.half ? 0 : 0.42 + 0.5 * Math.cos(Math.PI * d / this.half)
        + 0.08 * Math.cos(2 * Math.PI * d / this.half);           // Blackman window
      table[i] = this.cutoff * sinc * w;
    }
    return table;
  }

  kernel(d) {
    const t = Math.abs(d) * TABLE_STEPS;
    const i = Math.floor(t);
    if (i + 1 >= this.table.length) return 0;
    const f = t - i;
    return this.table[i] * (1 - f) + this.table[i + 1] * f;
  }

  append(block) {
    if (this.bufLen + block.length > this.buf.length) {
      const bigger = new Float32Array(Math.max(this.buf.length * 2, this.bufLen + block.length));
      bigger.set(this.buf.subarray(0, this.bufLen));
      this.buf = bigger;
    }
    this.buf.set(block, this.bufLen);
    this.bufLen += block.length;
  }

  resample() {
    const half = this.half;
    const end = this.bufStart + this.bufLen;                     // one past the newest input
    while (this.pos + half < end) {
      const centre = Math.floor(this.pos);
      let acc = 0, norm = 0;
      for (let k = centre - half + 1; k <= centre + half; k++) {
        const w = this.kernel(this.pos - k);
        acc += w * this.buf[k - this.bufStart];
        norm += w;
      }
      this.push(norm > 0 ? acc / norm : 0);                      // unity gain at DC
      this.pos += this.ratio;
    }
    // Drop input no future output needs (keep `half` samples of left context).
    const keep = Math.floor(this.pos) - half + 1 - this.bufStart;
    if (keep > 0) {
      this.buf.copyWithin(0, keep, this.bufLen);
      this.bufLen -= keep;
      this.bufStart += keep;
    }
  }

  push(sample) {
    const s = Math.max(-1, Math.min(1, sample));
    this.peak = Math.max(this.peak, Math.abs(s));
    this.frame[this.fill++] = s < 0 ? s * 32768 : s * 32767;
    if (this.fill === this.frameSamples) this.postFrame(false);
  }

  postFrame(partial) {
    if (this.fill === 0) return;
    const data = partial ? this.frame.slice(0, this.fill) : this.frame;
    this.port.postMessage({ pcm: data.buffer, peak: this.peak }, [data.buffer]);
    this.frame = new Int16Array(this.frameSamples);
    this.fill = 0;
    this.peak = 0;
  }

  process(inputs) {
    if (!this.running) return false;
    const input = inputs[0];
    if (input && input.length > 0 && input[0].length > 0) {
      let mono = input[0];
      if (input.length > 1) {
        mono = new Float32Array(input[0].length);
        for (const channel of input) for (let i = 0; i < mono.length; i++) mono[i] += channel[i] / input.length;
      }
      this.append(mono);
      this.resample();
    }
    return true;
  }
}

registerProcessor('burble-capture', BurbleCapture);
