/* generated from templates/f32-binary.c.in by cuvil_edge/codegen/kernels/generate.py; do not edit */
/* Elementwise binary kernels over m rows of n contiguous outputs: y[i][j] = act(a(i, j) op b(i, j)).
 *
 * The emitter collapses the broadcast into (outer loops) x m x n so that, in the innermost loop, each
 * operand is either a vector (stride 1) or one scalar per row (stride 0):
 *   f32_v<op>    a[i*sa + j]  op b[i*sb + j]    (vector-vector)
 *   f32_v<op>c   a[i*sa + j]  op b[i*sb]        (vector-scalar, e.g. x[1,C,H,W] * s[C,1,1])
 *   f32_vr<op>c  a[i*sa]      op b[i*sb + j]    (scalar-vector)
 * y may equal a (in place). Needs f32-unary (tails, v_pow).
 */
KERNEL void f32_vadd(int m, int n, const float* a, int sa, const float* b, int sb, float* y, Act act) {
  for (int i = 0; i < m; i++) {
    const float* ap = a + (size_t)i * sa;
    const float* bp = b + (size_t)i * sb;
    float* yp = y + (size_t)i * n;
    int j = 0;
    for (; j + 4 <= n; j += 4) {
      v128_t va = VLOAD(ap + j), vb = VLOAD(bp + j);
      VSTORE(yp + j, act_apply(wasm_f32x4_add(va, vb), act));
    }
    if (j < n) {
      v128_t va = load_tail(ap + j, n - j), vb = load_tail(bp + j, n - j);
      store_tail(yp + j, act_apply(wasm_f32x4_add(va, vb), act), n - j);
    }
  }
}

KERNEL void f32_vaddc(int m, int n, const float* a, int sa, const float* b, int sb, float* y, Act act) {
  for (int i = 0; i < m; i++) {
    const float* ap = a + (size_t)i * sa;
    const float* bp = b + (size_t)i * sb;
    float* yp = y + (size_t)i * n;
    const v128_t vb = VSPLAT(bp[0]);
    int j = 0;
    for (; j + 4 <= n; j += 4) {
      v128_t va = VLOAD(ap + j);
      VSTORE(yp + j, act_apply(wasm_f32x4_add(va, vb), act));
    }
    if (j < n) {
      v128_t va = load_tail(ap + j, n - j);
      store_tail(yp + j, act_apply(wasm_f32x4_add(va, vb), act), n - j);
    }
  }
}

KERNEL void f32_vraddc(int m, int n, const float* a, int sa, const float* b, int sb, float* y, Act act) {
  for (int i = 0; i < m; i++) {
    const float* ap = a + (size_t)i * sa;
    const float* bp = b + (size_t)i * sb;
    float* yp = y + (size_t)i * n;
    const v128_t va = VSPLAT(ap[0]);
    int j = 0;
    for (; j + 4 <= n; j += 4) {
      v128_t vb = VLOAD(bp + j);
      VSTORE(yp + j, act_apply(wasm_f32x4_add(va, vb), act));
    }
    if (j < n) {
      v128_t vb = load_tail(bp + j, n - j);
      store_tail(yp + j, act_apply(wasm_f32x4_add(va, vb), act), n - j);
    }
  }
}

KERNEL void f32_vsub(int m, int n, const float* a, int sa, const float* b, int sb, float* y, Act act) {
  for (int i = 0; i < m; i++) {
    const float* ap = a + (size_t)i * sa;
    const float* bp = b + (size_t)i * sb;
    float* yp = y + (size_t)i * n;
    int j = 0;
    for (; j + 4 <= n; j += 4) {
      v128_t va = VLOAD(ap + j), vb = VLOAD(bp + j);
      VSTORE(yp + j, act_apply(wasm_f32x4_sub(va, vb), act));
    }
    if (j < n) {
      v128_t va = load_tail(ap + j, n - j), vb = load_tail(bp + j, n - j);
      store_tail(yp + j, act_apply(wasm_f32x4_sub(va, vb), act), n - j);
    }
  }
}

KERNEL void f32_vsubc(int m, int n, const float* a, int sa, const float* b, int sb, float* y, Act act) {
  for (int i = 0; i < m; i++) {
    const float* ap = a + (size_t)i * sa;
    const float* bp = b + (size_t)i * sb;
    float* yp = y + (size_t)i * n;
    const v128_t vb = VSPLAT(bp[0]);
    int j = 0;
    for (; j + 4 <= n; j += 4) {
      v128_t va = VLOAD(ap + j);
      VSTORE(yp + j, act_apply(wasm_f32x4_sub(va, vb), act));
    }
    if (j < n) {
      v128_t va = load_tail(ap + j, n - j);
      store_tail(yp + j, act_apply(wasm_f32x4_sub(va, vb), act), n - j);
    }
  }
}

KERNEL void f32_vrsubc(int m, int n, const float* a, int sa, const float* b, int sb, float* y, Act act) {
  for (int i = 0; i < m; i++) {
    const float* ap = a + (size_t)i * sa;
    const float* bp = b + (size_t)i * sb;
    float* yp = y + (size_t)i * n;
    const v128_t va = VSPLAT(ap[0]);
    int j = 0;
    for (; j + 4 <= n; j += 4) {
      v128_t vb = VLOAD(bp + j);
      VSTORE(yp + j, act_apply(wasm_f32x4_sub(va, vb), act));
    }
    if (j < n) {
      v128_t vb = load_tail(bp + j, n - j);
      store_tail(yp + j, act_apply(wasm_f32x4_sub(va, vb), act), n - j);
    }
  }
}

KERNEL void f32_vmul(int m, int n, const float* a, int sa, const float* b, int sb, float* y, Act act) {
  for (int i = 0; i < m; i++) {
    const float* ap = a + (size_t)i * sa;
    const float* bp = b + (size_t)i * sb;
    float* yp = y + (size_t)i * n;
    int j = 0;
    for (; j + 4 <= n; j += 4) {
      v128_t va = VLOAD(ap + j), vb = VLOAD(bp + j);
      VSTORE(yp + j, act_apply(wasm_f32x4_mul(va, vb), act));
    }
    if (j < n) {
      v128_t va = load_tail(ap + j, n - j), vb = load_tail(bp + j, n - j);
      store_tail(yp + j, act_apply(wasm_f32x4_mul(va, vb), act), n - j);
    }
  }
}

KERNEL void f32_vmulc(int m, int n, const float* a, int sa, const float* b, int sb, float* y, Act act) {
  for (int i = 0; i < m; i++) {
    const float* ap = a + (size_t)i * sa;
    const float* bp = b + (size_t)i * sb;
    float* yp = y + (size_t)i * n;
    const v128_t vb = VSPLAT(bp[0]);
    int j = 0;
    for (; j + 4 <= n; j += 4) {
      v128_t va = VLOAD(ap + j);
      VSTORE(yp + j, act_apply(wasm_f32x4_mul(va, vb), act));
    }
    if (j < n) {
      v128_t va = load_tail(ap + j, n - j);
      store_tail(yp + j, act_apply(wasm_f32x4_mul(va, vb), act), n - j);
    }
  }
}

KERNEL void f32_vrmulc(int m, int n, const float* a, int sa, const float* b, int sb, float* y, Act act) {
  for (int i = 0; i < m; i++) {
    const float* ap = a + (size_t)i * sa;
    const float* bp = b + (size_t)i * sb;
    float* yp = y + (size_t)i * n;
    const v128_t va = VSPLAT(ap[0]);
    int j = 0;
    for (; j + 4 <= n; j += 4) {
      v128_t vb = VLOAD(bp + j);
      VSTORE(yp + j, act_apply(wasm_f32x4_mul(va, vb), act));
    }
    if (j < n) {
      v128_t vb = load_tail(bp + j, n - j);
      store_tail(yp + j, act_apply(wasm_f32x4_mul(va, vb), act), n - j);
    }
  }
}

KERNEL void f32_vdiv(int m, int n, const float* a, int sa, const float* b, int sb, float* y, Act act) {
  for (int i = 0; i < m; i++) {
    const float* ap = a + (size_t)i * sa;
    const float* bp = b + (size_t)i * sb;
    float* yp = y + (size_t)i * n;
    int j = 0;
    for (; j + 4 <= n; j += 4) {
      v128_t va = VLOAD(ap + j), vb = VLOAD(bp + j);
      VSTORE(yp + j, act_apply(wasm_f32x4_div(va, vb), act));
    }
    if (j < n) {
      v128_t va = load_tail(ap + j, n - j), vb = load_tail(bp + j, n - j);
      store_tail(yp + j, act_apply(wasm_f32x4_div(va, vb), act), n - j);
    }
  }
}

KERNEL void f32_vdivc(int m, int n, const float* a, int sa, const float* b, int sb, float* y, Act act) {
  for (int i = 0; i < m; i++) {
    const float* ap = a + (size_t)i * sa;
    const float* bp = b + (size_t)i * sb;
    float* yp = y + (size_t)i * n;
    const v128_t vb = VSPLAT(bp[0]);
    int j = 0;
    for (; j + 4 <= n; j += 4) {
      v128_t va = VLOAD(ap + j);
      VSTORE(yp + j, act_apply(wasm_f32x4_div(va, vb), act));
    }
    if (j < n) {
      v128_t va = load_tail(ap + j, n - j);
      store_tail(yp + j, act_apply(wasm_f32x4_div(va, vb), act), n - j);
    }
  }
}

KERNEL void f32_vrdivc(int m, int n, const float* a, int sa, const float* b, int sb, float* y, Act act) {
  for (int i = 0; i < m; i++) {
    const float* ap = a + (size_t)i * sa;
    const float* bp = b + (size_t)i * sb;
    float* yp = y + (size_t)i * n;
    const v128_t va = VSPLAT(ap[0]);
    int j = 0;
    for (; j + 4 <= n; j += 4) {
      v128_t vb = VLOAD(bp + j);
      VSTORE(yp + j, act_apply(wasm_f32x4_div(va, vb), act));
    }
    if (j < n) {
      v128_t vb = load_tail(bp + j, n - j);
      store_tail(yp + j, act_apply(wasm_f32x4_div(va, vb), act), n - j);
    }
  }
}

KERNEL void f32_vmax(int m, int n, const float* a, int sa, const float* b, int sb, float* y, Act act) {
  for (int i = 0; i < m; i++) {
    const float* ap = a + (size_t)i * sa;
    const float* bp = b + (size_t)i * sb;
    float* yp = y + (size_t)i * n;
    int j = 0;
    for (; j + 4 <= n; j += 4) {
      v128_t va = VLOAD(ap + j), vb = VLOAD(bp + j);
      VSTORE(yp + j, act_apply(VMAX(va, vb), act));
    }
    if (j < n) {
      v128_t va = load_tail(ap + j, n - j), vb = load_tail(bp + j, n - j);
      store_tail(yp + j, act_apply(VMAX(va, vb), act), n - j);
    }
  }
}

KERNEL void f32_vmaxc(int m, int n, const float* a, int sa, const float* b, int sb, float* y, Act act) {
  for (int i = 0; i < m; i++) {
    const float* ap = a + (size_t)i * sa;
    const float* bp = b + (size_t)i * sb;
    float* yp = y + (size_t)i * n;
    const v128_t vb = VSPLAT(bp[0]);
    int j = 0;
    for (; j + 4 <= n; j += 4) {
      v128_t va = VLOAD(ap + j);
      VSTORE(yp + j, act_apply(VMAX(va, vb), act));
    }
    if (j < n) {
      v128_t va = load_tail(ap + j, n - j);
      store_tail(yp + j, act_apply(VMAX(va, vb), act), n - j);
    }
  }
}

KERNEL void f32_vrmaxc(int m, int n, const float* a, int sa, const float* b, int sb, float* y, Act act) {
  for (int i = 0; i < m; i++) {
    const float* ap = a + (size_t)i * sa;
    const float* bp = b + (size_t)i * sb;
    float* yp = y + (size_t)i * n;
    const v128_t va = VSPLAT(ap[0]);
    int j = 0;
    for (; j + 4 <= n; j += 4) {
      v128_t vb = VLOAD(bp + j);
      VSTORE(yp + j, act_apply(VMAX(va, vb), act));
    }
    if (j < n) {
      v128_t vb = load_tail(bp + j, n - j);
      store_tail(yp + j, act_apply(VMAX(va, vb), act), n - j);
    }
  }
}

KERNEL void f32_vmin(int m, int n, const float* a, int sa, const float* b, int sb, float* y, Act act) {
  for (int i = 0; i < m; i++) {
    const float* ap = a + (size_t)i * sa;
    const float* bp = b + (size_t)i * sb;
    float* yp = y + (size_t)i * n;
    int j = 0;
    for (; j + 4 <= n; j += 4) {
      v128_t va = VLOAD(ap + j), vb = VLOAD(bp + j);
      VSTORE(yp + j, act_apply(VMIN(va, vb), act));
    }
    if (j < n) {
      v128_t va = load_tail(ap + j, n - j), vb = load_tail(bp + j, n - j);
      store_tail(yp + j, act_apply(VMIN(va, vb), act), n - j);
    }
  }
}

KERNEL void f32_vminc(int m, int n, const float* a, int sa, const float* b, int sb, float* y, Act act) {
  for (int i = 0; i < m; i++) {
    const float* ap = a + (size_t)i * sa;
    const float* bp = b + (size_t)i * sb;
    float* yp = y + (size_t)i * n;
    const v128_t vb = VSPLAT(bp[0]);
    int j = 0;
    for (; j + 4 <= n; j += 4) {
      v128_t va = VLOAD(ap + j);
      VSTORE(yp + j, act_apply(VMIN(va, vb), act));
    }
    if (j < n) {
      v128_t va = load_tail(ap + j, n - j);
      store_tail(yp + j, act_apply(VMIN(va, vb), act), n - j);
    }
  }
}

KERNEL void f32_vrminc(int m, int n, const float* a, int sa, const float* b, int sb, float* y, Act act) {
  for (int i = 0; i < m; i++) {
    const float* ap = a + (size_t)i * sa;
    const float* bp = b + (size_t)i * sb;
    float* yp = y + (size_t)i * n;
    const v128_t va = VSPLAT(ap[0]);
    int j = 0;
    for (; j + 4 <= n; j += 4) {
      v128_t vb = VLOAD(bp + j);
      VSTORE(yp + j, act_apply(VMIN(va, vb), act));
    }
    if (j < n) {
      v128_t vb = load_tail(bp + j, n - j);
      store_tail(yp + j, act_apply(VMIN(va, vb), act), n - j);
    }
  }
}

KERNEL void f32_vpow(int m, int n, const float* a, int sa, const float* b, int sb, float* y, Act act) {
  for (int i = 0; i < m; i++) {
    const float* ap = a + (size_t)i * sa;
    const float* bp = b + (size_t)i * sb;
    float* yp = y + (size_t)i * n;
    int j = 0;
    for (; j + 4 <= n; j += 4) {
      v128_t va = VLOAD(ap + j), vb = VLOAD(bp + j);
      VSTORE(yp + j, act_apply(v_pow(va, vb), act));
    }
    if (j < n) {
      v128_t va = load_tail(ap + j, n - j), vb = load_tail(bp + j, n - j);
      store_tail(yp + j, act_apply(v_pow(va, vb), act), n - j);
    }
  }
}

KERNEL void f32_vpowc(int m, int n, const float* a, int sa, const float* b, int sb, float* y, Act act) {
  for (int i = 0; i < m; i++) {
    const float* ap = a + (size_t)i * sa;
    const float* bp = b + (size_t)i * sb;
    float* yp = y + (size_t)i * n;
    const v128_t vb = VSPLAT(bp[0]);
    int j = 0;
    for (; j + 4 <= n; j += 4) {
      v128_t va = VLOAD(ap + j);
      VSTORE(yp + j, act_apply(v_pow(va, vb), act));
    }
    if (j < n) {
      v128_t va = load_tail(ap + j, n - j);
      store_tail(yp + j, act_apply(v_pow(va, vb), act), n - j);
    }
  }
}

KERNEL void f32_vrpowc(int m, int n, const float* a, int sa, const float* b, int sb, float* y, Act act) {
  for (int i = 0; i < m; i++) {
    const float* ap = a + (size_t)i * sa;
    const float* bp = b + (size_t)i * sb;
    float* yp = y + (size_t)i * n;
    const v128_t va = VSPLAT(ap[0]);
    int j = 0;
    for (; j + 4 <= n; j += 4) {
      v128_t vb = VLOAD(bp + j);
      VSTORE(yp + j, act_apply(v_pow(va, vb), act));
    }
    if (j < n) {
      v128_t vb = load_tail(bp + j, n - j);
      store_tail(yp + j, act_apply(v_pow(va, vb), act), n - j);
    }
  }
}

