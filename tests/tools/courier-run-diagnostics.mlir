// courier-run prints a failed compile's diagnostics as mlir-opt does, byte for byte: each at
// the start of its line, with the source line and a caret; notes after their error. The same
// holds when the module compiles in a worker process (--isolate).
// RUN: printf 'func.func @main() {\n  retrun\n}\n' > %t.syntax.mlir
// RUN: not courier-run %t.syntax.mlir --no-disk-cache 2> %t.syntax.run
// RUN: not courier-opt %t.syntax.mlir 2> %t.syntax.opt
// RUN: diff %t.syntax.opt %t.syntax.run
// RUN: not courier-run %t.syntax.mlir --no-disk-cache --isolate 2> %t.syntax.isolated
// RUN: diff %t.syntax.opt %t.syntax.isolated
// RUN: FileCheck %s --check-prefix=SYNTAX --match-full-lines --strict-whitespace < %t.syntax.run
//
// RUN: printf 'func.func @f() {\n  return\n}\nfunc.func @f() {\n\treturn\n}\n' > %t.twice.mlir
// RUN: not courier-run %t.twice.mlir --no-disk-cache 2> %t.twice.run
// The engine prints no op beside a diagnostic: neither does courier-opt here.
// RUN: not courier-opt %t.twice.mlir --mlir-print-op-on-diagnostic=false 2> %t.twice.opt
// RUN: diff %t.twice.opt %t.twice.run
// RUN: FileCheck %s --check-prefix=NOTE --match-full-lines --strict-whitespace < %t.twice.run

// With --strict-whitespace a pattern is all the text after its colon.
// SYNTAX:{{.*}}.syntax.mlir:2:3: error: custom op 'retrun' is unknown{{.*}}
// SYNTAX-NEXT:  retrun
// SYNTAX-NEXT:  ^
// SYNTAX-NOT:{{.}}

// NOTE:{{.*}}.twice.mlir:4:1: error: redefinition of symbol named 'f'
// NOTE-NEXT:func.func @f() {
// NOTE-NEXT:^
// NOTE-NEXT:{{.*}}.twice.mlir:1:1: note: see existing symbol definition here
// NOTE-NEXT:func.func @f() {
// NOTE-NEXT:^
// NOTE-NOT:{{.}}
