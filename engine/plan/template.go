package plan

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/dvtrun/dvtrun/engine"
)

// A template is one {{ … }} of a step's SQL: a name (this, the interval
// names) or a call of ref, source, var or secret with literal arguments.
// This is the whole language: no filters, no {% %} blocks, no expressions.
type template struct {
	start, end int    // byte offsets of "{{" and after "}}"
	text       string // as written, for messages
	name       string // this | ref | source | var | secret | data_interval_start | …
	call       bool   // name(…)
	args       []literal
}

// literal is a template argument: a string, a number, a boolean or none.
type literal struct {
	kind  byte   // 's' string, 'n' number, 'b' boolean, '0' none
	text  string // the string's value, the number as written, "true"/"false"
	quote byte   // a string's quote character
}

// Interval names (Airflow's): logical_date is the interval's start.
const (
	nameIntervalStart = "data_interval_start"
	nameIntervalEnd   = "data_interval_end"
	nameLogicalDate   = "logical_date"
)

// templateNames are the names a template may use bare; templateCalls the
// functions, with their argument counts.
var (
	templateNames = map[string]bool{
		"this": true, nameIntervalStart: true, nameIntervalEnd: true, nameLogicalDate: true,
		nameIntervalStart + "_utc": true, nameIntervalEnd + "_utc": true, nameLogicalDate + "_utc": true,
	}
	templateCalls = map[string][2]int{"ref": {1, 1}, "source": {2, 2}, "var": {1, 2}, "secret": {1, 1}}
)

// templateError is a template that cannot be rendered; the renderer adds
// the step.
type templateError struct{ msg string }

func (e *templateError) Error() string { return e.msg }

func templateErrorf(format string, args ...any) error {
	return &templateError{msg: fmt.Sprintf(format, args...)}
}

// parseTemplates finds the {{ … }} of sql that are code, in order. A
// template inside a quoted string or identifier is an error (the renderer
// writes literals and names itself, quoted: inside quotes it would be
// quoted twice), while braces there that are no template ('{{%') are the
// string's; one inside a comment is left as written, not rendered and not
// a dependency.
func parseTemplates(sql string) ([]template, error) {
	var out []template
	for i := 0; i < len(sql); {
		switch c := sql[i]; {
		case strings.HasPrefix(sql[i:], "--"):
			i = skipUntil(sql, i+2, "\n")
		case strings.HasPrefix(sql[i:], "/*"):
			i = skipUntil(sql, i+2, "*/")
		case c == '\'' || c == '"' || c == '`':
			j := skipQuoted(sql, i, c)
			if t := quotedTemplate(sql[i:j]); t != "" {
				return nil, templateErrorf("%s is inside a quoted string or name; write it bare (values are rendered as quoted literals, names as quoted names)", t)
			}
			i = j
		case strings.HasPrefix(sql[i:], "$$"):
			i = skipUntil(sql, i+2, "$$")
		case strings.HasPrefix(sql[i:], "{{"):
			text, end := cutTemplate(sql, i)
			if end < 0 {
				return nil, templateErrorf("%s has no closing }}", text)
			}
			t, err := parseTemplate(sql[i+2 : end-2])
			if err != nil {
				return nil, templateErrorf("%s: %v", text, err)
			}
			t.start, t.end, t.text = i, end, text
			out = append(out, t)
			i = end
		default:
			i++
		}
	}
	return out, nil
}

// quotedTemplate returns the first template of a quoted token that would
// render outside quotes, as written, or "": other text in braces (a
// pattern such as '{{%') is the token's own.
func quotedTemplate(token string) string {
	for k := 0; ; {
		at := strings.Index(token[k:], "{{")
		if at < 0 {
			return ""
		}
		text, end := cutTemplate(token, k+at)
		if end < 0 {
			return ""
		}
		if _, err := parseTemplate(token[k+at+2 : end-2]); err == nil {
			return text
		}
		k += at + 2
	}
}

// cutTemplate returns the template starting at i as written (shortened for
// messages) and the index after its "}}", or -1 when it is not closed.
func cutTemplate(sql string, i int) (string, int) {
	k := strings.Index(sql[i:], "}}")
	if k < 0 {
		return shorten(sql[i:]), -1
	}
	return shorten(sql[i : i+k+2]), i + k + 2
}

// shorten is a template as messages show it: as written when short and
// plain, quoted and cut otherwise.
func shorten(s string) string { return engine.ShowText(s) }

// parseTemplate reads the inside of {{ … }}: a name, or a call with
// literal arguments.
func parseTemplate(body string) (template, error) {
	s := &scanner{src: body}
	s.blank()
	name := s.ident()
	if name == "" {
		return template{}, fmt.Errorf("want a name such as ref, source, var, secret, this or %s", nameIntervalStart)
	}
	t := template{name: name}
	s.blank()
	if s.peek() == '(' {
		t.call = true
		s.i++
		s.blank()
		for s.peek() != ')' {
			if len(t.args) > 0 {
				if s.peek() != ',' {
					return template{}, fmt.Errorf("want ',' or ')' after argument %d", len(t.args))
				}
				s.i++
				s.blank()
			}
			a, err := s.literal()
			if err != nil {
				return template{}, err
			}
			t.args = append(t.args, a)
			s.blank()
		}
		s.i++
		s.blank()
	}
	if s.i < len(s.src) {
		return template{}, fmt.Errorf("unexpected %q (templates are a name or a call with literal arguments)", s.src[s.i:])
	}
	if t.call {
		n, ok := templateCalls[name]
		switch {
		case !ok:
			return template{}, fmt.Errorf("unknown function %s (want ref, source, var or secret)", name)
		case len(t.args) < n[0] || len(t.args) > n[1]:
			return template{}, fmt.Errorf("%s takes %s", name, argCount(n))
		}
		for i, a := range t.args {
			if a.kind != 's' && !(name == "var" && i == 1) {
				return template{}, fmt.Errorf("%s's argument %d must be a quoted string", name, i+1)
			}
		}
		return t, nil
	}
	if !templateNames[name] {
		if _, isCall := templateCalls[name]; isCall {
			return template{}, fmt.Errorf("%s is a function: call it, e.g. %s('name')", name, name)
		}
		return template{}, fmt.Errorf("unknown name %s (want this, %s, %s, %s or their _utc forms)", name, nameIntervalStart, nameIntervalEnd, nameLogicalDate)
	}
	return t, nil
}

func argCount(n [2]int) string {
	if n[0] == n[1] {
		if n[0] == 1 {
			return "one argument"
		}
		return fmt.Sprintf("%d arguments", n[0])
	}
	return fmt.Sprintf("%d or %d arguments", n[0], n[1])
}

type scanner struct {
	src string
	i   int
}

func (s *scanner) peek() byte {
	if s.i < len(s.src) {
		return s.src[s.i]
	}
	return 0
}

func (s *scanner) blank() {
	for s.i < len(s.src) && strings.IndexByte(" \t\r\n", s.src[s.i]) >= 0 {
		s.i++
	}
}

func (s *scanner) ident() string {
	j := s.i
	for j < len(s.src) && (s.src[j] == '_' || s.src[j] >= 'a' && s.src[j] <= 'z' || s.src[j] >= 'A' && s.src[j] <= 'Z' || j > s.i && s.src[j] >= '0' && s.src[j] <= '9') {
		j++
	}
	id := s.src[s.i:j]
	s.i = j
	return id
}

// literal reads a quoted string (no escapes: a string holds no quote of its
// own kind), a number, true/false or none/null (Jinja's and YAML's names).
func (s *scanner) literal() (literal, error) {
	switch c := s.peek(); {
	case c == '\'' || c == '"':
		k := strings.IndexByte(s.src[s.i+1:], c)
		if k < 0 {
			return literal{}, fmt.Errorf("unterminated string")
		}
		v := s.src[s.i+1 : s.i+1+k]
		if strings.ContainsRune(v, '\\') {
			return literal{}, fmt.Errorf("string %q: backslash escapes are not supported", v)
		}
		s.i += k + 2
		return literal{kind: 's', text: v, quote: c}, nil
	case c == '-' || c >= '0' && c <= '9':
		j := s.i + 1
		for j < len(s.src) && strings.IndexByte("0123456789.eE+-", s.src[j]) >= 0 {
			j++
		}
		text := s.src[s.i:j]
		if _, err := strconv.ParseFloat(text, 64); err != nil {
			return literal{}, fmt.Errorf("%q is not a number", text)
		}
		s.i = j
		return literal{kind: 'n', text: text}, nil
	default:
		switch id := s.ident(); strings.ToLower(id) {
		case "true", "false":
			return literal{kind: 'b', text: strings.ToLower(id)}, nil
		case "none", "null":
			return literal{kind: '0'}, nil
		case "":
			return literal{}, fmt.Errorf("want a literal argument (a quoted string, a number, true, false or none)")
		default:
			return literal{}, fmt.Errorf("%s is not a literal (a quoted string, a number, true, false or none)", id)
		}
	}
}
