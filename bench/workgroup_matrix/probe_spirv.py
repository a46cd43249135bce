#!/usr/bin/env python3
"""SPIR-V probes of workgroup-scope cooperative matrices (VK_NV_cooperative_matrix2).

Writes, assembles (spirv-as) and validates (spirv-val) the modules that the
`workgroup_matrix_gpu` example of hrx-tensor runs on the H200. Each module is
f16 x f16 -> f32 on matrices of Workgroup scope, named by what it does:

  wg_BMxBNxBK_T  C = A B (8192^3 in the example), plain KHR loads from storage
  wt_BMxBNxBK_T  the same with tensor-addressed loads (bounds-clamped slices)
  wp_BMxBNxBK_T  wt with the next step's loads issued before the multiply-add
  pkr_BMxBNxBK_T multiply-adds of factors held in registers (the MMA ceiling)
  pks_BMxBNxBK_T factors loaded from workgroup memory every product, 1 barrier
  dk_MxBNxBK_T   decode split-k partial sums, tensor-addressed loads

T is the workgroup size. Usage:

  python3 bench/workgroup_matrix/probe_spirv.py OUT_DIR KIND,BM,BN,BK,T ...

with spirv-as and spirv-val from a SPIRV-Tools new enough to know
SPV_NV_cooperative_matrix2 (`cargo xtask ci` fetches one into
target/spirv-tools/cmeel.prefix/bin; set SPIRV_TOOLS to another directory).
"""

import os
import subprocess
import sys

TOOLS = os.environ.get(
    "SPIRV_TOOLS",
    os.path.join(os.path.dirname(__file__), "../../target/spirv-tools/cmeel.prefix/bin"),
)

HEADER = """OpCapability Shader
OpCapability Float16
OpCapability StorageBuffer16BitAccess
OpCapability CooperativeMatrixKHR
OpCapability VulkanMemoryModel
{caps}OpExtension "SPV_KHR_cooperative_matrix"
{exts}OpMemoryModel Logical Vulkan
OpEntryPoint GLCompute %main "main" %wgid_var {interface}
OpExecutionMode %main LocalSize {threads} 1 1
OpDecorate %wgid_var BuiltIn WorkgroupId
OpDecorate %arr_f16 ArrayStride 2
OpMemberDecorate %buf_f16 0 Offset 0
OpDecorate %buf_f16 Block
OpDecorate %arr_f32 ArrayStride 4
OpMemberDecorate %buf_f32 0 Offset 0
OpDecorate %buf_f32 Block
{bindings}{pc_members}OpDecorate %pc Block
%void = OpTypeVoid
%fn = OpTypeFunction %void
%u32 = OpTypeInt 32 0
%bool = OpTypeBool
%f16 = OpTypeFloat 16
%f32 = OpTypeFloat 32
%v3u = OpTypeVector %u32 3
%arr_f16 = OpTypeRuntimeArray %f16
%buf_f16 = OpTypeStruct %arr_f16
%arr_f32 = OpTypeRuntimeArray %f32
%buf_f32 = OpTypeStruct %arr_f32
%pc = OpTypeStruct {pc_types}
%p_buf_f16 = OpTypePointer StorageBuffer %buf_f16
%p_buf_f32 = OpTypePointer StorageBuffer %buf_f32
%p_pc = OpTypePointer PushConstant %pc
%p_pc_u32 = OpTypePointer PushConstant %u32
%p_in_v3u = OpTypePointer Input %v3u
%p_sb_f16 = OpTypePointer StorageBuffer %f16
%p_sb_f32 = OpTypePointer StorageBuffer %f32
%c0 = OpConstant %u32 0
%c1 = OpConstant %u32 1
%c2 = OpConstant %u32 2
%c3 = OpConstant %u32 3
%c264 = OpConstant %u32 264
%c_bm = OpConstant %u32 {bm}
%c_bn = OpConstant %u32 {bn}
%c_bk = OpConstant %u32 {bk}
%c_bmbn = OpConstant %u32 {bmbn}
%matA = OpTypeCooperativeMatrixKHR %f16 %c2 %c_bm %c_bk %c0
%matB = OpTypeCooperativeMatrixKHR %f16 %c2 %c_bk %c_bn %c1
%matC = OpTypeCooperativeMatrixKHR %f32 %c2 %c_bm %c_bn %c2
%f32_0 = OpConstant %f32 0
%f16_0 = OpConstant %f16 0
%zeroA = OpConstantComposite %matA %f16_0
%zeroB = OpConstantComposite %matB %f16_0
%zeroC = OpConstantComposite %matC %f32_0
{globals}%P = OpVariable %p_pc PushConstant
%wgid_var = OpVariable %p_in_v3u Input
%main = OpFunction %void None %fn
%entry = OpLabel
%wgid = OpLoad %v3u %wgid_var
%wx = OpCompositeExtract %u32 %wgid 0
%wy = OpCompositeExtract %u32 %wgid 1
%pc0 = OpAccessChain %p_pc_u32 %P %c0
%pcv0 = OpLoad %u32 %pc0
"""

TENSOR_CAPS = "OpCapability TensorAddressingNV\nOpCapability CooperativeMatrixTensorAddressingNV\n"
TENSOR_EXTS = 'OpExtension "SPV_NV_cooperative_matrix2"\nOpExtension "SPV_NV_tensor_addressing"\n'


def binding(name, index, writable):
    lines = f"OpDecorate %{name} DescriptorSet 0\nOpDecorate %{name} Binding {index}\n"
    return lines + ("" if writable else f"OpDecorate %{name} NonWritable\n")


def loop(start, end, step, carried, body, latch_next="%knext = OpIAdd %u32 %k %c_bk\n"):
    """A loop over %k from start to end with extra phis `carried`."""
    phis = "".join(f"{p} = OpPhi {t} {init} %entry {nxt} %latch\n" for p, t, init, nxt in carried)
    return f"""OpBranch %header
%header = OpLabel
%k = OpPhi %u32 {start} %entry %knext %latch
{phis}%cond = OpULessThan %bool %k {end}
OpLoopMerge %merge %latch None
OpBranchConditional %cond %body %merge
%body = OpLabel
{body}OpBranch %latch
%latch = OpLabel
{latch_next}OpBranch %header
%merge = OpLabel
"""


def tensor_slice(name, layout, r0, rows, c0, cols, mat, zero, ptr):
    return (
        f"%s{name} = OpTensorLayoutSliceNV %tl_t {layout} {r0} {rows} {c0} {cols}\n"
        f"%{name} = OpCooperativeMatrixLoadTensorNV {mat} {ptr} {zero} %s{name} None None\n"
    )


def module(kind, bm, bn, bk, threads):
    tensor = kind in ("wt", "wp", "dk")
    matmul = kind in ("wg", "wt", "wp", "dk")
    fields = {
        "caps": TENSOR_CAPS if tensor else "",
        "exts": TENSOR_EXTS if tensor else "",
        "threads": threads,
        "bm": bm,
        "bn": bn,
        "bk": bk,
        "bmbn": bm * bn,
    }
    if matmul:
        # Bindings A, B, C; push constants M, N, K (and the split depth).
        count = 4 if kind == "dk" else 3
        fields["interface"] = "%A %B %C %P"
        fields["bindings"] = binding("A", 0, False) + binding("B", 1, False) + binding("C", 2, True)
        fields["pc_types"] = " ".join(["%u32"] * count)
        fields["pc_members"] = "".join(f"OpMemberDecorate %pc {i} Offset {4 * i}\n" for i in range(count))
        fields["globals"] = (
            "%A = OpVariable %p_buf_f16 StorageBuffer\n%B = OpVariable %p_buf_f16 StorageBuffer\n"
            "%C = OpVariable %p_buf_f32 StorageBuffer\n"
            + ("%tl_t = OpTypeTensorLayoutNV %c2 %c1\n" if tensor else "")
        )
    else:
        # Binding A (the factors' source), C; push constant: iterations.
        fields["interface"] = "%A %C %P" + (" %SA %SB" if kind == "pks" else "")
        fields["bindings"] = binding("A", 0, False) + binding("C", 1, True)
        fields["pc_types"] = "%u32"
        fields["pc_members"] = "OpMemberDecorate %pc 0 Offset 0\n"
        la, lb = bm * bk, bk * bn
        shared = (
            f"%c_la = OpConstant %u32 {la}\n%c_lb = OpConstant %u32 {lb}\n"
            f"%c_la2 = OpConstant %u32 {2 * la}\n%c_lb2 = OpConstant %u32 {2 * lb}\n"
            "%arr_sa = OpTypeArray %f16 %c_la2\n%arr_sb = OpTypeArray %f16 %c_lb2\n"
            "%p_wg_sa = OpTypePointer Workgroup %arr_sa\n%p_wg_sb = OpTypePointer Workgroup %arr_sb\n"
            "%p_wg_f16 = OpTypePointer Workgroup %f16\n"
            "%SA = OpVariable %p_wg_sa Workgroup\n%SB = OpVariable %p_wg_sb Workgroup\n"
        )
        fields["globals"] = (
            "%A = OpVariable %p_buf_f16 StorageBuffer\n%C = OpVariable %p_buf_f32 StorageBuffer\n"
            + (shared if kind == "pks" else "")
        )
    text = HEADER.format(**fields)
    acc = ("%acc", "%matC", "%zeroC", "%accnext")
    mma = "%accnext = OpCooperativeMatrixMulAddKHR %matC %a %b %acc\n"
    if not matmul:
        text += "%pA0 = OpAccessChain %p_sb_f16 %A %c0 %c0\n"
        if kind == "pkr":
            text += (
                "%a = OpCooperativeMatrixLoadKHR %matA %pA0 %c0 %c_bk\n"
                "%b = OpCooperativeMatrixLoadKHR %matB %pA0 %c0 %c_bn\n"
            )
            body = mma
        else:
            # Alternate halves of the workgroup arrays so nothing is hoisted.
            body = (
                "%par = OpBitwiseAnd %u32 %k %c1\n%oa = OpIMul %u32 %par %c_la\n"
                "%ob = OpIMul %u32 %par %c_lb\n"
                "%psa = OpAccessChain %p_wg_f16 %SA %oa\n%psb = OpAccessChain %p_wg_f16 %SB %ob\n"
                "%a = OpCooperativeMatrixLoadKHR %matA %psa %c0 %c_bk\n"
                "%b = OpCooperativeMatrixLoadKHR %matB %psb %c0 %c_bn\n"
                "OpControlBarrier %c2 %c2 %c264\n" + mma
            )
        text += loop("%c0", "%pcv0", 1, [acc], body, "%knext = OpIAdd %u32 %k %c1\n")
        text += (
            "%cidx = OpIMul %u32 %wx %c_bmbn\n%pcc = OpAccessChain %p_sb_f32 %C %c0 %cidx\n"
            "OpCooperativeMatrixStoreKHR %pcc %accnext_out %c0 %c_bn\n"
        ).replace("%accnext_out", "%acc")
        return text + "OpReturn\nOpFunctionEnd\n"
    text += (
        "%M = OpCopyObject %u32 %pcv0\n"
        "%pN = OpAccessChain %p_pc_u32 %P %c1\n%N = OpLoad %u32 %pN\n"
        "%pK = OpAccessChain %p_pc_u32 %P %c2\n%K = OpLoad %u32 %pK\n"
        "%pA0 = OpAccessChain %p_sb_f16 %A %c0 %c0\n%pB0 = OpAccessChain %p_sb_f16 %B %c0 %c0\n"
    )
    if kind == "dk":
        # Workgroup (x, y): columns x*BN.., split y over k in [y*KR, (y+1)*KR).
        text += (
            "%pKR = OpAccessChain %p_pc_u32 %P %c3\n%KR = OpLoad %u32 %pKR\n"
            "%row0 = OpCopyObject %u32 %c0\n%col0 = OpIMul %u32 %wx %c_bn\n"
            "%k0 = OpIMul %u32 %wy %KR\n%kend = OpIAdd %u32 %k0 %KR\n"
        )
        start, end = "%k0", "%kend"
    else:
        text += "%row0 = OpIMul %u32 %wy %c_bm\n%col0 = OpIMul %u32 %wx %c_bn\n"
        start, end = "%c0", "%K"
    if tensor:
        text += (
            "%tlA0 = OpCreateTensorLayoutNV %tl_t\n%tlA = OpTensorLayoutSetDimensionNV %tl_t %tlA0 %M %K\n"
            "%tlB0 = OpCreateTensorLayoutNV %tl_t\n%tlB = OpTensorLayoutSetDimensionNV %tl_t %tlB0 %K %N\n"
        )
    if kind == "wg":
        body = (
            "%ar = OpIMul %u32 %row0 %K\n%aidx = OpIAdd %u32 %ar %k\n"
            "%pa = OpAccessChain %p_sb_f16 %A %c0 %aidx\n"
            "%a = OpCooperativeMatrixLoadKHR %matA %pa %c0 %K\n"
            "%krow = OpIMul %u32 %k %N\n%bidx = OpIAdd %u32 %krow %col0\n"
            "%pb = OpAccessChain %p_sb_f16 %B %c0 %bidx\n"
            "%b = OpCooperativeMatrixLoadKHR %matB %pb %c0 %N\n" + mma
        )
        text += loop(start, end, bk, [acc], body)
    elif kind in ("wt", "dk"):
        body = (
            tensor_slice("a", "%tlA", "%row0", "%c_bm", "%k", "%c_bk", "%matA", "%zeroA", "%pA0")
            + tensor_slice("b", "%tlB", "%k", "%c_bk", "%col0", "%c_bn", "%matB", "%zeroB", "%pB0")
            + mma
        )
        text += loop(start, end, bk, [acc], body)
    else:  # wp: the first loads before the loop, the next ones before each product
        text += tensor_slice("a0", "%tlA", "%row0", "%c_bm", "%c0", "%c_bk", "%matA", "%zeroA", "%pA0")
        text += tensor_slice("b0", "%tlB", "%c0", "%c_bk", "%col0", "%c_bn", "%matB", "%zeroB", "%pB0")
        body = (
            "%kn = OpIAdd %u32 %k %c_bk\n"
            + tensor_slice("an", "%tlA", "%row0", "%c_bm", "%kn", "%c_bk", "%matA", "%zeroA", "%pA0")
            + tensor_slice("bn", "%tlB", "%kn", "%c_bk", "%col0", "%c_bn", "%matB", "%zeroB", "%pB0")
            + mma
        )
        carried = [("%a", "%matA", "%a0", "%an"), ("%b", "%matB", "%b0", "%bn"), acc]
        text += loop(start, end, bk, carried, body, "%knext = OpCopyObject %u32 %kn\n")
    if kind == "dk":
        text += "%mn = OpIMul %u32 %M %N\n%crow = OpIMul %u32 %wy %mn\n"
    else:
        text += "%crow = OpIMul %u32 %row0 %N\n"
    text += (
        "%cidx = OpIAdd %u32 %crow %col0\n%pcc = OpAccessChain %p_sb_f32 %C %c0 %cidx\n"
        "OpCooperativeMatrixStoreKHR %pcc %acc %c0 %N\n"
    )
    return text + "OpReturn\nOpFunctionEnd\n"


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    failed = False
    for spec in sys.argv[2:]:
        kind, *dims = spec.split(",")
        bm, bn, bk, threads = map(int, dims)
        name = os.path.join(out, f"{kind}_{bm}x{bn}x{bk}_{threads}")
        with open(name + ".spvasm", "w") as f:
            f.write(module(kind, bm, bn, bk, threads))
        for tool, args in [
            ("spirv-as", ["--target-env", "vulkan1.3", name + ".spvasm", "-o", name + ".spv"]),
            ("spirv-val", ["--target-env", "vulkan1.3", name + ".spv"]),
        ]:
            run = subprocess.run([os.path.join(TOOLS, tool)] + args, capture_output=True, text=True)
            if run.returncode:
                print(f"{spec}: {tool}: {run.stderr.strip()}")
                failed = True
                break
        os.remove(name + ".spvasm")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
