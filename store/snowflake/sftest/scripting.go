package sftest

import (
	"context"
	"errors"
	"fmt"
	"math/big"
	"strconv"
	"strings"
	"time"

	"github.com/duckdb/duckdb-go/v2"
)

// Snowflake Scripting: the subset dvtrun sends, executed as one statement
// (EXECUTE IMMEDIATE $$ block $$, or an anonymous block sent as the request).
// See the package doc for the list and the documentation each follows.

// scriptNode is one statement of a block.
type scriptNode interface{}

type (
	// sqlNode is a SQL statement (BEGIN TRANSACTION, COMMIT and ROLLBACK
	// included), :name referring to variables.
	sqlNode struct{ toks []token }
	// letNode is LET name [type] := expr, name := expr, or a RESULTSET
	// assignment (the query runs at assignment, as in Snowflake).
	letNode struct {
		name      string
		resultset bool
		declare   bool // LET declares; a plain assignment needs a declared name
		expr      []token
	}
	ifNode struct {
		conds  [][]token
		bodies [][]scriptNode
		orElse []scriptNode
	}
	returnNode struct {
		expr  []token
		table string // RETURN TABLE(name)
	}
	raiseNode struct{ name string } // "" re-raises inside a handler
	blockNode struct {
		decls    []scriptDecl
		body     []scriptNode
		handlers []scriptHandler
	}
)

// scriptDecl is one DECLARE entry.
type scriptDecl struct {
	name      string
	resultset bool
	exception bool
	excCode   string // e.g. "-20001"
	excMsg    string
	init      []token // DEFAULT / := expression or (query); nil: NULL
}

type scriptHandler struct {
	names []string // upper-case exception names; OTHER catches all
	body  []scriptNode
}

// scriptError is an exception travelling up the blocks.
type scriptError struct {
	name string // user exception name; "" for a failed statement or expression
	sf   *sfError
}

func (e *scriptError) Error() string { return e.sf.Error() }

// isBlockRequest reports whether the request is one Scripting statement:
// EXECUTE IMMEDIATE with a string, or an anonymous block (DECLARE…, or BEGIN
// not followed by TRANSACTION/WORK/NAME or a semicolon).
func isBlockRequest(toks []token) (body string, ok bool) {
	sig := compact(toks)
	if len(sig) == 0 {
		return "", false
	}
	if sig[0].is("EXECUTE") && len(sig) >= 3 && sig[1].is("IMMEDIATE") && sig[2].kind == tkString {
		for _, t := range sig[3:] {
			if bare(t) != ";" {
				return "", false // USING (…) binds are not supported
			}
		}
		return sig[2].val, true
	}
	if sig[0].is("DECLARE") || sig[0].is("BEGIN") && !isTxBegin(sig) {
		return render(toks), true
	}
	return "", false
}

// isTxBegin reports whether toks (significant) start a transaction rather
// than a block: "BEGIN;", "BEGIN TRANSACTION", "BEGIN WORK", "BEGIN NAME x".
func isTxBegin(sig []token) bool {
	if len(sig) == 1 {
		return true
	}
	n := sig[1]
	return bare(n) == ";" || n.is("TRANSACTION") || n.is("WORK") || n.is("NAME")
}

// scriptParser reads a block from significant tokens.
type scriptParser struct {
	toks []token
	pos  int
}

func (p *scriptParser) peek(n int) token {
	if p.pos+n < len(p.toks) {
		return p.toks[p.pos+n]
	}
	return token{}
}

func (p *scriptParser) errf(format string, args ...any) error {
	near := "end of block"
	if p.pos < len(p.toks) {
		near = strings.TrimSpace(render(p.toks[p.pos:min(p.pos+6, len(p.toks))]))
	}
	return newSFError(CodeCompilation, "42601", "SQL compilation error: %s near %q", fmt.Sprintf(format, args...), near)
}

func (p *scriptParser) expectWord(w string) error {
	if !p.peek(0).is(w) {
		return p.errf("expected %s", w)
	}
	p.pos++
	return nil
}

func (p *scriptParser) skipSemicolon() {
	if bare(p.peek(0)) == ";" {
		p.pos++
	}
}

// untilSemicolon returns the tokens up to the next top-level semicolon and
// moves past it.
func (p *scriptParser) untilSemicolon() []token {
	start, depth := p.pos, 0
	for ; p.pos < len(p.toks); p.pos++ {
		switch bare(p.toks[p.pos]) {
		case "(":
			depth++
		case ")":
			depth--
		case ";":
			if depth <= 0 {
				out := p.toks[start:p.pos]
				p.pos++
				return out
			}
		}
	}
	return p.toks[start:]
}

func parseScript(text string) (*blockNode, error) {
	toks, err := lex(text)
	if err != nil {
		return nil, newSFError(CodeCompilation, "42601", "SQL compilation error: %v", err)
	}
	p := &scriptParser{toks: compact(toks)}
	b, err := p.block()
	if err != nil {
		return nil, err
	}
	if p.pos < len(p.toks) {
		return nil, p.errf("unexpected text after END")
	}
	return b, nil
}

func (p *scriptParser) block() (*blockNode, error) {
	b := &blockNode{}
	if p.peek(0).is("DECLARE") {
		p.pos++
		for p.pos < len(p.toks) && !p.peek(0).is("BEGIN") {
			d, err := p.decl()
			if err != nil {
				return nil, err
			}
			b.decls = append(b.decls, d)
		}
	}
	if err := p.expectWord("BEGIN"); err != nil {
		return nil, err
	}
	body, err := p.statements("END", "EXCEPTION")
	if err != nil {
		return nil, err
	}
	b.body = body
	if p.peek(0).is("EXCEPTION") {
		p.pos++
		for p.peek(0).is("WHEN") {
			p.pos++
			var h scriptHandler
			for {
				if p.peek(0).kind != tkWord {
					return nil, p.errf("expected an exception name")
				}
				h.names = append(h.names, p.peek(0).upper())
				p.pos++
				if !p.peek(0).is("OR") {
					break
				}
				p.pos++
			}
			if p.peek(0).is("EXIT") {
				p.pos++
			} else if p.peek(0).is("CONTINUE") {
				return nil, p.errf("sftest: CONTINUE handlers are not supported")
			}
			if err := p.expectWord("THEN"); err != nil {
				return nil, err
			}
			if h.body, err = p.statements("WHEN", "END"); err != nil {
				return nil, err
			}
			b.handlers = append(b.handlers, h)
		}
	}
	if err := p.expectWord("END"); err != nil {
		return nil, err
	}
	p.skipSemicolon()
	return b, nil
}

func (p *scriptParser) decl() (scriptDecl, error) {
	if p.peek(0).kind != tkWord {
		return scriptDecl{}, p.errf("expected a variable name")
	}
	d := scriptDecl{name: p.peek(0).upper()}
	p.pos++
	rest := p.untilSemicolon()
	switch {
	case len(rest) > 0 && rest[0].is("EXCEPTION"):
		// name EXCEPTION (-20001, 'message')
		d.exception = true
		var nums []string
		for _, t := range rest[1:] {
			switch {
			case t.kind == tkNumber:
				nums = append(nums, bare(t))
			case bare(t) == "-":
				nums = append(nums, "-")
			case t.kind == tkString:
				d.excMsg = t.val
			}
		}
		d.excCode = strings.Join(nums, "")
		return d, nil
	case len(rest) > 0 && rest[0].is("RESULTSET"):
		d.resultset = true
		rest = rest[1:]
	case len(rest) > 0 && rest[0].is("CURSOR"):
		return d, p.errf("sftest: cursors are not supported")
	}
	// [type] [DEFAULT | :=] expr
	if _, expr, ok := splitInit(rest); ok {
		d.init = expr
	}
	return d, nil
}

// splitInit splits "[type] DEFAULT expr" or "[type] := expr" (a DECLARE
// entry or an assignment after its name) into the part before the
// initialiser and the expression; ok is false without one.
func splitInit(rest []token) (head, expr []token, ok bool) {
	for i, t := range rest {
		if t.is("DEFAULT") {
			return rest[:i], rest[i+1:], true
		}
		if bare(t) == ":" && i+1 < len(rest) && bare(rest[i+1]) == "=" {
			return rest[:i], rest[i+2:], true
		}
	}
	return rest, nil, false
}

// statements parses until one of the stop words at statement start.
func (p *scriptParser) statements(stop ...string) ([]scriptNode, error) {
	var out []scriptNode
	for p.pos < len(p.toks) {
		for _, w := range stop {
			if p.peek(0).is(w) {
				return out, nil
			}
		}
		n, err := p.statement()
		if err != nil {
			return nil, err
		}
		out = append(out, n)
	}
	return nil, p.errf("missing END")
}

func (p *scriptParser) statement() (scriptNode, error) {
	t := p.peek(0)
	switch {
	case t.is("DECLARE") || t.is("BEGIN") && !isTxBegin(p.toks[p.pos:]):
		return p.block()
	case t.is("IF"):
		return p.ifStatement()
	case t.is("LET"):
		p.pos++
		return p.assignment(true)
	case t.is("RETURN"):
		p.pos++
		rest := p.untilSemicolon()
		if len(rest) == 4 && rest[0].is("TABLE") && bare(rest[1]) == "(" && bare(rest[3]) == ")" {
			return &returnNode{table: rest[2].upper()}, nil
		}
		return &returnNode{expr: rest}, nil
	case t.is("RAISE"):
		p.pos++
		rest := p.untilSemicolon()
		if len(rest) == 0 {
			return &raiseNode{}, nil
		}
		return &raiseNode{name: rest[0].upper()}, nil
	case t.kind == tkWord && bare(p.peek(1)) == ":" && bare(p.peek(2)) == "=":
		return p.assignment(false)
	}
	return &sqlNode{toks: p.untilSemicolon()}, nil
}

// assignment parses name [type] := expr (after LET, if any).
func (p *scriptParser) assignment(declare bool) (scriptNode, error) {
	if p.peek(0).kind != tkWord {
		return nil, p.errf("expected a variable name")
	}
	n := &letNode{name: p.peek(0).upper(), declare: declare}
	p.pos++
	head, expr, ok := splitInit(p.untilSemicolon())
	if !ok {
		return nil, p.errf("expected := in the assignment to %s", n.name)
	}
	for _, t := range head {
		if t.is("RESULTSET") {
			n.resultset = true
		}
	}
	n.expr = expr
	return n, nil
}

func (p *scriptParser) ifStatement() (scriptNode, error) {
	n := &ifNode{}
	for {
		p.pos++ // IF or ELSEIF
		start := p.pos
		for p.pos < len(p.toks) && !p.peek(0).is("THEN") {
			p.pos++
		}
		cond := p.toks[start:p.pos]
		if err := p.expectWord("THEN"); err != nil {
			return nil, err
		}
		body, err := p.statements("ELSEIF", "ELSE", "END")
		if err != nil {
			return nil, err
		}
		n.conds, n.bodies = append(n.conds, cond), append(n.bodies, body)
		if !p.peek(0).is("ELSEIF") {
			break
		}
	}
	if p.peek(0).is("ELSE") {
		p.pos++
		body, err := p.statements("END")
		if err != nil {
			return nil, err
		}
		n.orElse = body
	}
	if err := p.expectWord("END"); err != nil {
		return nil, err
	}
	if err := p.expectWord("IF"); err != nil {
		return nil, err
	}
	p.skipSemicolon()
	return n, nil
}

// scriptScope holds the variables, RESULTSETs and exceptions of a block.
type scriptScope struct {
	parent *scriptScope
	vars   map[string]any
	rs     map[string]*result
	excs   map[string]scriptDecl
}

func newScope(parent *scriptScope) *scriptScope {
	return &scriptScope{parent: parent, vars: map[string]any{}, rs: map[string]*result{}, excs: map[string]scriptDecl{}}
}

func (s *scriptScope) lookup(name string) (any, bool) {
	for sc := s; sc != nil; sc = sc.parent {
		if v, ok := sc.vars[name]; ok {
			return v, true
		}
	}
	return nil, false
}

func (s *scriptScope) set(name string, v any) bool {
	for sc := s; sc != nil; sc = sc.parent {
		if _, ok := sc.vars[name]; ok {
			sc.vars[name] = v
			return true
		}
	}
	return false
}

func (s *scriptScope) resultset(name string) (*result, bool) {
	if o := s.resultsetOwner(name); o != nil {
		return o.rs[name], true
	}
	return nil, false
}

// resultsetOwner returns the scope that declares RESULTSET name, nil if none.
func (s *scriptScope) resultsetOwner(name string) *scriptScope {
	for sc := s; sc != nil; sc = sc.parent {
		if _, ok := sc.rs[name]; ok {
			return sc
		}
	}
	return nil
}

func (s *scriptScope) exception(name string) (scriptDecl, bool) {
	for sc := s; sc != nil; sc = sc.parent {
		if d, ok := sc.excs[name]; ok {
			return d, true
		}
	}
	return scriptDecl{}, false
}

// scriptRun executes one block request on a session.
type scriptRun struct {
	sess    *session
	ctx     context.Context
	current *scriptError // the exception a handler is running for
	child   func(sqlText string, err error)
	root    *scriptScope // holds the global SQLROWCOUNT
}

// runScript executes a block as one statement and returns its result: the
// RESULTSET of RETURN TABLE(…), or one row in a column "anonymous block"
// holding the RETURN value (NULL without RETURN). A failure the block does
// not handle fails the request; a transaction the block opened is then
// rolled back, so a failed block leaves neither locks nor half its writes.
func (s *session) runScript(ctx context.Context, text string, child func(string, error)) (*result, error) {
	b, err := parseScript(text)
	if err != nil {
		return nil, err
	}
	wasInTx := s.inTx
	r := &scriptRun{sess: s, ctx: ctx, child: child}
	res, _, err := r.block(b, nil)
	if err != nil {
		if s.inTx && !wasInTx {
			_, _ = s.endTx(ctx, false)
		}
		var se *scriptError
		if errors.As(err, &se) {
			return nil, se.sf
		}
		return nil, err
	}
	if s.inTx && !wasInTx {
		// Snowflake requires a transaction begun inside a procedure (an
		// anonymous block is one) to end inside it.
		_, _ = s.endTx(ctx, false)
		return nil, newSFError("000641", "0A000",
			"Modifying a transaction that has started at a different scope is not allowed. (sftest: the block ended with its transaction open; it was rolled back)")
	}
	if res == nil {
		return r.scalar(`CAST(NULL AS VARCHAR)`)
	}
	return res, nil
}

// block runs b; returned reports a RETURN (which ends every enclosing block).
func (r *scriptRun) block(b *blockNode, parent *scriptScope) (*result, bool, error) {
	sc := newScope(parent)
	if parent == nil {
		r.root = sc
		sc.vars["SQLROWCOUNT"] = nil
	}
	for _, d := range b.decls {
		switch {
		case d.exception:
			sc.excs[d.name] = d
		case d.resultset:
			if d.init != nil {
				res, err := r.query(unparen(d.init), sc)
				if err != nil {
					return nil, false, err
				}
				sc.rs[d.name] = res
			} else {
				sc.rs[d.name] = nil
			}
		default:
			var v any
			if d.init != nil {
				var err error
				if v, err = r.eval(d.init, sc); err != nil {
					return nil, false, err
				}
			}
			sc.vars[d.name] = v
		}
	}
	res, returned, err := r.nodes(b.body, sc)
	if err == nil {
		return res, returned, nil
	}
	var se *scriptError
	if !errors.As(err, &se) {
		se = &scriptError{sf: mapError(err)}
	}
	for _, h := range b.handlers {
		if !handles(h, se) {
			continue
		}
		// EXIT handler: its statements run, then the block ends.
		prev := r.current
		r.current = se
		hs := newScope(sc)
		hs.vars["SQLCODE"] = sqlCode(se.sf.code)
		hs.vars["SQLERRM"] = se.sf.msg
		hs.vars["SQLSTATE"] = se.sf.sqlState
		res, returned, herr := r.nodes(h.body, hs)
		r.current = prev
		return res, returned, herr
	}
	return nil, false, se
}

func sqlCode(code string) any {
	if n, err := strconv.ParseInt(code, 10, 64); err == nil {
		return n
	}
	return code
}

// handles reports whether handler h catches e: OTHER catches everything,
// STATEMENT_ERROR a failed SQL statement, a name the exception declared
// with it.
func handles(h scriptHandler, e *scriptError) bool {
	for _, n := range h.names {
		switch {
		case n == "OTHER":
			return true
		case n == "STATEMENT_ERROR" || n == "EXPRESSION_ERROR":
			if e.name == "" {
				return true
			}
		case n == e.name:
			return true
		}
	}
	return false
}

func (r *scriptRun) nodes(ns []scriptNode, sc *scriptScope) (*result, bool, error) {
	for _, n := range ns {
		if err := r.ctx.Err(); err != nil {
			return nil, false, err
		}
		switch n := n.(type) {
		case *blockNode:
			res, returned, err := r.block(n, sc)
			if err != nil || returned {
				return res, returned, err
			}
		case *sqlNode:
			if vars, rest := selectInto(n.toks); vars != nil {
				if err := r.selectInto(rest, vars, sc); err != nil {
					return nil, false, err
				}
				continue
			}
			if _, err := r.query(n.toks, sc); err != nil {
				return nil, false, err
			}
		case *letNode:
			if err := r.assign(n, sc); err != nil {
				return nil, false, err
			}
		case *ifNode:
			body := n.orElse
			for i, c := range n.conds {
				v, err := r.eval(c, sc)
				if err != nil {
					return nil, false, err
				}
				if b, _ := v.(bool); b {
					body = n.bodies[i]
					break
				}
			}
			res, returned, err := r.nodes(body, sc)
			if err != nil || returned {
				return res, returned, err
			}
		case *returnNode:
			if n.table != "" {
				res, ok := sc.resultset(n.table)
				if !ok || res == nil {
					return nil, false, &scriptError{sf: newSFError(CodeCompilation, "42601", "SQL compilation error: RESULTSET %s is not assigned", n.table)}
				}
				return res, true, nil
			}
			res, err := r.scalar(render(r.substitute(n.expr, sc, true)))
			return res, true, err
		case *raiseNode:
			if n.name == "" {
				if r.current == nil {
					return nil, false, &scriptError{sf: newSFError(CodeCompilation, "42601", "SQL compilation error: RAISE without an exception outside a handler")}
				}
				return nil, false, r.current
			}
			d, ok := sc.exception(n.name)
			if !ok {
				return nil, false, &scriptError{sf: newSFError(CodeCompilation, "42601", "SQL compilation error: exception %s is not declared", n.name)}
			}
			return nil, false, &scriptError{name: n.name, sf: newSFError(d.excCode, "P0001",
				"Uncaught exception of type '%s' : %s", n.name, d.excMsg)}
		}
	}
	return nil, false, nil
}

func (r *scriptRun) assign(n *letNode, sc *scriptScope) error {
	if owner := sc.resultsetOwner(n.name); n.resultset || owner != nil {
		res, err := r.query(unparen(n.expr), sc)
		if err != nil {
			return err
		}
		if owner == nil {
			owner = sc
		}
		owner.rs[n.name] = res
		return nil
	}
	v, err := r.eval(n.expr, sc)
	if err != nil {
		return err
	}
	if n.declare {
		sc.vars[n.name] = v
		return nil
	}
	if !sc.set(n.name, v) {
		return &scriptError{sf: newSFError(CodeCompilation, "42601", "SQL compilation error: variable %s is not declared", n.name)}
	}
	return nil
}

// query runs a SQL statement of the block with its :variables substituted
// and sets SQLROWCOUNT: the rows a DML statement affected, NULL after any
// other statement (Snowflake's 2025_01 behaviour, enabled by default).
func (r *scriptRun) query(toks []token, sc *scriptScope) (*result, error) {
	res, err := r.exec(render(r.substitute(toks, sc, false)))
	if err == nil && r.root != nil {
		r.root.vars["SQLROWCOUNT"] = rowCount(res)
	}
	return res, err
}

// rowCount is the number of rows a DML result reports (the sum of its count
// columns: a MERGE's inserted, updated and deleted rows), nil for any other
// statement.
func rowCount(res *result) any {
	if res.stmtType < stmtInsert || res.stmtType > stmtMerge || len(res.rowSet) != 1 {
		return nil
	}
	var n int64
	for i, v := range res.rowSet[0] {
		if v == nil || res.rowType[i].Name == "number of multi-joined rows updated" {
			continue
		}
		c, err := strconv.ParseInt(*v, 10, 64)
		if err != nil {
			return nil
		}
		n += c
	}
	return n
}

// exec runs one SQL statement (variables already substituted) and reports
// it as a child of the request.
func (r *scriptRun) exec(text string) (*result, error) {
	stmts, err := parseRequest(text)
	if err != nil {
		return nil, &scriptError{sf: newSFError(CodeCompilation, "42000", "SQL compilation error:\n%v", err)}
	}
	if len(stmts) != 1 {
		return nil, &scriptError{sf: newSFError(CodeCompilation, "42601", "SQL compilation error: expected one statement")}
	}
	res, err := r.sess.execStmt(r.ctx, stmts[0], nil)
	if r.child != nil {
		r.child(stmts[0].orig, err)
	}
	if err != nil {
		return nil, &scriptError{sf: mapError(err)}
	}
	return res, nil
}

// scalar answers SELECT expr AS "anonymous block", the shape of a block's
// RETURN value; expr has its variables substituted.
func (r *scriptRun) scalar(expr string) (*result, error) {
	return r.exec(`SELECT (` + expr + `) AS "anonymous block"`)
}

// selectInto splits SELECT … INTO :a, :b FROM … into the variable names
// and the query without the INTO clause; nil when there is no INTO.
func selectInto(toks []token) ([]string, []token) {
	if len(toks) == 0 || !toks[0].is("SELECT") {
		return nil, nil
	}
	depth := 0
	for i, t := range toks {
		switch bare(t) {
		case "(":
			depth++
		case ")":
			depth--
		}
		if depth != 0 || !t.is("INTO") {
			continue
		}
		var vars []string
		j := i + 1
		for j+1 < len(toks) && bare(toks[j]) == ":" && toks[j+1].kind == tkWord {
			vars = append(vars, toks[j+1].upper())
			j += 2
			if j < len(toks) && bare(toks[j]) == "," {
				j++
			}
		}
		if len(vars) == 0 {
			return nil, nil
		}
		rest := append(append([]token(nil), toks[:i]...), toks[j:]...)
		return vars, rest
	}
	return nil, nil
}

// selectInto runs a single-row query and sets the variables to its values
// (INTO: "The SELECT statement must return a single row").
func (r *scriptRun) selectInto(query []token, vars []string, sc *scriptScope) error {
	if r.child != nil {
		r.child(strings.TrimSpace(render(query)), nil)
	}
	if r.root != nil {
		r.root.vars["SQLROWCOUNT"] = nil // a SELECT is not DML
	}
	vals, err := r.row(render(r.substitute(query, sc, false)), len(vars))
	if err != nil {
		return err
	}
	for i, name := range vars {
		if !sc.set(name, vals[i]) {
			return &scriptError{sf: newSFError(CodeCompilation, "42601", "SQL compilation error: variable %s is not declared", name)}
		}
	}
	return nil
}

// eval computes an expression (variables by bare name or :name) to a Go
// value by asking DuckDB, inside the session's transaction.
func (r *scriptRun) eval(expr []token, sc *scriptScope) (any, error) {
	expr = r.substitute(expr, sc, true)
	if v, ok := quickEval(expr); ok {
		return v, nil
	}
	vals, err := r.row("SELECT "+render(expr), 1)
	if err != nil {
		return nil, err
	}
	return vals[0], nil
}

// row runs a query that must return one row of n columns and returns its
// values as Go values.
func (r *scriptRun) row(text string, n int) ([]any, error) {
	stmts, err := parseRequest(text)
	if err != nil || len(stmts) != 1 {
		return nil, &scriptError{sf: newSFError(CodeCompilation, "42601", "SQL compilation error: invalid expression or query %q", strings.TrimSpace(text))}
	}
	s := r.sess
	if s.doomed != nil {
		return nil, &scriptError{sf: s.doomed}
	}
	if err := s.begin(r.ctx); err != nil {
		return nil, &scriptError{sf: mapError(err)}
	}
	fail := func(err error) ([]any, error) {
		if s.duckTx {
			s.checkAborted(r.ctx, err)
		}
		return nil, &scriptError{sf: mapError(err)}
	}
	rows, err := s.conn.QueryContext(r.ctx, stmts[0].duck)
	if err != nil {
		return fail(err)
	}
	defer rows.Close()
	vals := make([]any, n)
	ptrs := make([]any, n)
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return fail(err)
		}
		return nil, &scriptError{sf: newSFError("100183", "P0000", "Query produced no results")}
	}
	if err := rows.Scan(ptrs...); err != nil {
		return fail(err)
	}
	if rows.Next() {
		return nil, &scriptError{sf: newSFError("100184", "22000", "Query produced more than one row")}
	}
	for i, v := range vals {
		vals[i] = goValue(v)
	}
	return vals, nil
}

// goValue normalises a DuckDB value for a variable.
func goValue(v any) any {
	switch x := v.(type) {
	case duckdb.Decimal:
		if x.Scale == 0 && x.Value.IsInt64() {
			return x.Value.Int64()
		}
		return x.Float64()
	case *big.Int:
		if x.IsInt64() {
			return x.Int64()
		}
		return x.String()
	case []byte:
		return string(x)
	case int32:
		return int64(x)
	}
	return v
}

// substitute replaces variable references with literals of their values:
// :name anywhere an operand can start, and in expressions (bare) a name
// that is a variable and not a function, column qualifier or qualified
// column.
func (r *scriptRun) substitute(toks []token, sc *scriptScope, bareNames bool) []token {
	var out []token
	for i := 0; i < len(toks); i++ {
		t := toks[i]
		if t.kind == tkPunct && bare(t) == ":" && i+1 < len(toks) && toks[i+1].kind == tkWord &&
			!strings.HasPrefix(toks[i+1].text, " ") && (len(out) == 0 || !endsOperand(out[len(out)-1]) || isKeyword(out[len(out)-1])) {
			if v, ok := sc.lookup(toks[i+1].upper()); ok {
				out = append(out, literalToken(v, strings.HasPrefix(t.text, " ")))
				i++
				continue
			}
		}
		if bareNames && t.kind == tkWord && (i+1 >= len(toks) || bare(toks[i+1]) != "(" && bare(toks[i+1]) != ".") &&
			(i == 0 || bare(toks[i-1]) != ".") {
			if v, ok := sc.lookup(t.upper()); ok {
				out = append(out, literalToken(v, strings.HasPrefix(t.text, " ")))
				continue
			}
		}
		out = append(out, t)
	}
	return out
}

// literalToken renders a variable's value as a Snowflake literal.
func literalToken(v any, space bool) token {
	pre := ""
	if space {
		pre = " "
	}
	switch x := v.(type) {
	case nil:
		return token{kind: tkWord, text: pre + "NULL"}
	case bool:
		return token{kind: tkWord, text: pre + strings.ToUpper(strconv.FormatBool(x))}
	case int64:
		return token{kind: tkNumber, text: pre + strconv.FormatInt(x, 10)}
	case float64:
		return token{kind: tkWord, text: pre + "CAST('" + strconv.FormatFloat(x, 'g', -1, 64) + "' AS DOUBLE)"}
	case time.Time:
		return token{kind: tkWord, text: pre + "CAST('" + x.UTC().Format("2006-01-02 15:04:05.999999999") + "+00:00' AS TIMESTAMP_TZ(9))"}
	}
	s := fmt.Sprint(v)
	return token{kind: tkString, text: pre + "'" + strings.NewReplacer(`\`, `\\`, `'`, `''`).Replace(s) + "'", val: s}
}

// unparen strips one pair of parentheses around a whole query.
func unparen(toks []token) []token {
	if len(toks) >= 2 && bare(toks[0]) == "(" && skipParens(toks, 0) == len(toks)-1 && bare(toks[len(toks)-1]) == ")" {
		return toks[1 : len(toks)-1]
	}
	return toks
}

// quickEval computes in Go the expressions blocks use most — literals,
// comparisons of integers or strings, AND/OR of those — so that an IF does
// not cost a DuckDB query. ok is false for anything else, which DuckDB
// evaluates.
func quickEval(toks []token) (any, bool) {
	for u := unparen(toks); len(u) < len(toks); u = unparen(toks) {
		toks = u
	}
	for _, op := range []string{"OR", "AND"} {
		if parts := splitTop(toks, func(t token) bool { return t.is(op) }); len(parts) > 1 {
			acc := op == "AND"
			for _, p := range parts {
				v, ok := quickEval(p)
				b, isBool := v.(bool)
				if !ok || !isBool {
					return nil, false
				}
				if op == "AND" {
					acc = acc && b
				} else {
					acc = acc || b
				}
			}
			return acc, true
		}
	}
	if len(toks) == 1 {
		return literalValue(toks[0])
	}
	if len(toks) == 3 && toks[1].kind == tkPunct {
		return compareLiterals(toks[0], bare(toks[1]), toks[2])
	}
	if len(toks) == 4 && toks[1].kind == tkPunct && toks[2].kind == tkPunct && !strings.HasPrefix(toks[2].text, " ") {
		return compareLiterals(toks[0], bare(toks[1])+bare(toks[2]), toks[3])
	}
	return nil, false
}

func literalValue(t token) (any, bool) {
	switch {
	case t.kind == tkNumber:
		n, err := strconv.ParseInt(bare(t), 10, 64)
		return n, err == nil
	case t.kind == tkString:
		return t.val, true
	case t.is("TRUE"):
		return true, true
	case t.is("FALSE"):
		return false, true
	}
	return nil, false
}

func compareLiterals(a token, op string, b token) (any, bool) {
	x, ok1 := literalValue(a)
	y, ok2 := literalValue(b)
	if !ok1 || !ok2 {
		return nil, false
	}
	var c int
	switch xv := x.(type) {
	case int64:
		yv, ok := y.(int64)
		if !ok {
			return nil, false
		}
		c = cmpInt(xv, yv)
	case string:
		yv, ok := y.(string)
		if !ok {
			return nil, false
		}
		c = strings.Compare(xv, yv)
	default:
		return nil, false
	}
	switch op {
	case "=":
		return c == 0, true
	case "<>", "!=":
		return c != 0, true
	case "<":
		return c < 0, true
	case "<=":
		return c <= 0, true
	case ">":
		return c > 0, true
	case ">=":
		return c >= 0, true
	}
	return nil, false
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
