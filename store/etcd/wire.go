package etcd

// The protocol buffers of the etcd v3 API calls this store makes, written by hand (field numbers
// from etcd's api/etcdserverpb/rpc.proto and api/mvccpb/kv.proto, stable since 3.0): encoders for
// the requests, decoders for the answers. Decoders skip fields they do not know, as protobuf
// does, and fail on a truncated or malformed message instead of guessing.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
)

// Protobuf wire types.
const (
	wtVarint = 0
	wtI64    = 1
	wtBytes  = 2
	wtI32    = 5
)

func appendTag(b []byte, field, wt int) []byte {
	return binary.AppendUvarint(b, uint64(field)<<3|uint64(wt))
}

// appendInt appends a varint field; zero is left out (proto3's default) unless always.
func appendInt(b []byte, field int, v int64, always bool) []byte {
	if v == 0 && !always {
		return b
	}
	return binary.AppendUvarint(appendTag(b, field, wtVarint), uint64(v))
}

func appendBool(b []byte, field int, v bool) []byte {
	if !v {
		return b
	}
	return append(appendTag(b, field, wtVarint), 1)
}

// appendBytes appends a length-delimited field; empty is left out unless always.
func appendBytes(b []byte, field int, v []byte, always bool) []byte {
	if len(v) == 0 && !always {
		return b
	}
	b = binary.AppendUvarint(appendTag(b, field, wtBytes), uint64(len(v)))
	return append(b, v...)
}

// appendMsg appends a nested message (always, even when empty: a oneof's choice is its presence).
func appendMsg(b []byte, field int, m pbMsg) []byte {
	return appendBytes(b, field, m.marshalPB(nil), true)
}

// pbMsg is a request this client sends.
type pbMsg interface{ marshalPB(b []byte) []byte }

// pbOut is an answer this client decodes.
type pbOut interface{ unmarshalPB(b []byte) error }

// errMalformed reports an answer that is not a well-formed protobuf message.
var errMalformed = errors.New("etcd: malformed protobuf answer")

// pbReader walks the fields of one message.
type pbReader struct {
	b   []byte
	err error
	wt  int
}

// next reads the next field's tag; false at the end of the message or on an error.
func (r *pbReader) next() (field int, ok bool) {
	if r.err != nil || len(r.b) == 0 {
		return 0, false
	}
	t, n := binary.Uvarint(r.b)
	if n <= 0 || t>>3 == 0 || t>>3 >= 1<<29 { // field numbers are 1 to 2^29-1
		r.err = errMalformed
		return 0, false
	}
	r.b = r.b[n:]
	r.wt = int(t & 7)
	return int(t >> 3), true
}

func (r *pbReader) varint() uint64 {
	if r.wt != wtVarint {
		r.err = errMalformed
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.err = errMalformed
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *pbReader) int() i64    { return i64(r.varint()) }
func (r *pbReader) bool() bool  { return r.varint() != 0 }
func (r *pbReader) str() string { return string(r.bytes()) }

// bytes returns a length-delimited field's contents (a sub-slice of the message).
func (r *pbReader) bytes() []byte {
	if r.wt != wtBytes {
		r.err = errMalformed
		return nil
	}
	l, n := binary.Uvarint(r.b)
	if n <= 0 || l > uint64(len(r.b)-n) {
		r.err = errMalformed
		return nil
	}
	v := r.b[n : n+int(l)]
	r.b = r.b[n+int(l):]
	return v
}

// msg decodes a nested message into m.
func (r *pbReader) msg(m pbOut) {
	v := r.bytes()
	if r.err == nil {
		r.err = m.unmarshalPB(v)
	}
}

// decode calls field for each field of the message b, stopping at the first malformed one.
func decode(b []byte, field func(r *pbReader, f int)) error {
	r := pbReader{b: b}
	for f, ok := r.next(); ok; f, ok = r.next() {
		field(&r, f)
	}
	return r.err
}

// skip passes over a field this client does not read.
func (r *pbReader) skip() {
	switch r.wt {
	case wtVarint:
		r.varint()
	case wtBytes:
		r.bytes()
	case wtI64, wtI32:
		n := 8
		if r.wt == wtI32 {
			n = 4
		}
		if len(r.b) < n {
			r.err = errMalformed
			return
		}
		r.b = r.b[n:]
	default: // groups (3, 4) are not used by etcd's API
		r.err = errMalformed
	}
}

// ---- requests

type empty struct{}

func (empty) marshalPB(b []byte) []byte { return b }

func (q rangeReq) marshalPB(b []byte) []byte {
	b = appendBytes(b, 1, q.Key, false)
	b = appendBytes(b, 2, q.RangeEnd, false)
	b = appendInt(b, 3, int64(q.Limit), false)
	if q.Descend {
		b = appendInt(b, 5, 2, false) // sort_order DESCEND; sort_target KEY (0)
	}
	b = appendBool(b, 8, q.KeysOnly)
	return appendBool(b, 9, q.CountOnly)
}

func (q putReq) marshalPB(b []byte) []byte {
	b = appendBytes(b, 1, q.Key, false)
	b = appendBytes(b, 2, q.Value, false)
	return appendInt(b, 3, int64(q.Lease), false)
}

func (q deleteReq) marshalPB(b []byte) []byte {
	b = appendBytes(b, 1, q.Key, false)
	b = appendBytes(b, 2, q.RangeEnd, false)
	return appendBool(b, 3, q.PrevKV)
}

// Compare's enums (rpc.proto).
var (
	compareResults = map[string]int64{"EQUAL": 0, "GREATER": 1, "LESS": 2, "NOT_EQUAL": 3}
	compareTargets = map[string]int64{"VERSION": 0, "CREATE": 1, "MOD": 2, "VALUE": 3, "LEASE": 4}
)

func (c compare) marshalPB(b []byte) []byte {
	b = appendInt(b, 1, compareResults[c.Result], false)
	b = appendInt(b, 2, compareTargets[c.Target], false)
	b = appendBytes(b, 3, c.Key, false)
	// target_union is a oneof: the chosen field is sent even when zero.
	switch {
	case c.CreateRevision != nil:
		b = appendInt(b, 5, int64(*c.CreateRevision), true)
	case c.ModRevision != nil:
		b = appendInt(b, 6, int64(*c.ModRevision), true)
	case c.Value != nil:
		b = appendBytes(b, 7, *c.Value, true)
	case c.Lease != nil:
		b = appendInt(b, 8, int64(*c.Lease), true)
	}
	return appendBytes(b, 64, c.RangeEnd, false)
}

func (o op) marshalPB(b []byte) []byte {
	switch {
	case o.Range != nil:
		return appendMsg(b, 1, *o.Range)
	case o.Put != nil:
		return appendMsg(b, 2, *o.Put)
	case o.Delete != nil:
		return appendMsg(b, 3, *o.Delete)
	case o.Txn != nil:
		return appendMsg(b, 4, *o.Txn)
	}
	return b
}

func (t txnReq) marshalPB(b []byte) []byte {
	for _, c := range t.Compare {
		b = appendMsg(b, 1, c)
	}
	for _, o := range t.Success {
		b = appendMsg(b, 2, o)
	}
	for _, o := range t.Failure {
		b = appendMsg(b, 3, o)
	}
	return b
}

// leaseGrantReq is LeaseGrantRequest: TTL is field 1, ID field 2.
type leaseGrantReq struct{ TTL i64 }

func (q leaseGrantReq) marshalPB(b []byte) []byte { return appendInt(b, 1, int64(q.TTL), false) }

// leaseIDReq is LeaseRevokeRequest, LeaseKeepAliveRequest and LeaseTimeToLiveRequest: ID is field 1.
type leaseIDReq struct{ ID i64 }

func (q leaseIDReq) marshalPB(b []byte) []byte { return appendInt(b, 1, int64(q.ID), false) }

// watchReq is a WatchRequest with its create_request (field 1).
type watchReq struct{ Create watchCreate }

func (q watchReq) marshalPB(b []byte) []byte { return appendMsg(b, 1, q.Create) }

func (q watchCreate) marshalPB(b []byte) []byte {
	b = appendBytes(b, 1, q.Key, false)
	return appendInt(b, 3, int64(q.StartRevision), false)
}

type authReq struct{ Name, Password string }

func (q authReq) marshalPB(b []byte) []byte {
	b = appendBytes(b, 1, []byte(q.Name), false)
	return appendBytes(b, 2, []byte(q.Password), false)
}

var alarmActions = map[string]int64{"GET": 0, "ACTIVATE": 1, "DEACTIVATE": 2}

func (q alarmReq) marshalPB(b []byte) []byte {
	b = appendInt(b, 1, alarmActions[q.Action], false)
	if q.MemberID != "" {
		id, _ := strconv.ParseUint(q.MemberID, 10, 64)
		b = appendInt(b, 2, int64(id), false)
	}
	for v, name := range alarmTypes {
		if name == q.Alarm && v != 0 {
			b = appendInt(b, 3, int64(v), false)
		}
	}
	return b
}

// ---- answers

func (h *header) unmarshalPB(b []byte) error {
	return decode(b, func(r *pbReader, f int) {
		if f == 3 {
			h.Revision = r.int()
		} else {
			r.skip()
		}
	})
}

func (kv *keyValue) unmarshalPB(b []byte) error {
	return decode(b, func(r *pbReader, f int) {
		switch f {
		case 1:
			kv.Key = r.bytes()
		case 2:
			kv.CreateRevision = r.int()
		case 3:
			kv.ModRevision = r.int()
		case 5:
			kv.Value = r.bytes()
		case 6:
			kv.Lease = r.int()
		default:
			r.skip()
		}
	})
}

func (m *rangeResp) unmarshalPB(b []byte) error {
	return decode(b, func(r *pbReader, f int) {
		switch f {
		case 1:
			r.msg(&m.Header)
		case 2:
			var kv keyValue
			r.msg(&kv)
			m.Kvs = append(m.Kvs, kv)
		case 4:
			m.Count = r.int()
		default:
			r.skip()
		}
	})
}

func (m *deleteResp) unmarshalPB(b []byte) error {
	return decode(b, func(r *pbReader, f int) {
		if f == 3 {
			var kv keyValue
			r.msg(&kv)
			m.PrevKvs = append(m.PrevKvs, kv)
		} else {
			r.skip()
		}
	})
}

func (m *opResp) unmarshalPB(b []byte) error {
	return decode(b, func(r *pbReader, f int) {
		switch f {
		case 1:
			m.Range = &rangeResp{}
			r.msg(m.Range)
		case 3:
			m.Delete = &deleteResp{}
			r.msg(m.Delete)
		default: // response_put, response_txn: nothing this store reads
			r.skip()
		}
	})
}

func (m *txnResp) unmarshalPB(b []byte) error {
	return decode(b, func(r *pbReader, f int) {
		switch f {
		case 1:
			r.msg(&m.Header)
		case 2:
			m.Succeeded = r.bool()
		case 3:
			var o opResp
			r.msg(&o)
			m.Responses = append(m.Responses, o)
		default:
			r.skip()
		}
	})
}

// unmarshalPB reads LeaseGrantResponse, LeaseKeepAliveResponse and LeaseTimeToLiveResponse, which
// share ID (2) and TTL (3); a grant's error (4, a string; a time-to-live's 4 is grantedTTL) is
// returned.
func (m *leaseResp) unmarshalPB(b []byte) error {
	var grant string // LeaseGrantResponse's error
	err := decode(b, func(r *pbReader, f int) {
		switch f {
		case 2:
			m.ID = r.int()
		case 3:
			m.TTL = r.int()
		case 4:
			if r.wt != wtBytes {
				r.skip()
			} else {
				grant = r.str()
			}
		default:
			r.skip()
		}
	})
	if err == nil && grant != "" {
		return fmt.Errorf("etcd: lease grant: %s", grant)
	}
	return err
}

func (m *watchResp) unmarshalPB(b []byte) error {
	return decode(b, func(r *pbReader, f int) {
		switch f {
		case 3:
			m.Created = r.bool()
		case 4:
			m.Canceled = r.bool()
		case 5:
			m.CompactRevision = r.int()
		case 6:
			m.CancelReason = r.str()
		case 11:
			var ev event
			r.msg(&ev)
			m.Events = append(m.Events, ev)
		default:
			r.skip()
		}
	})
}

func (ev *event) unmarshalPB(b []byte) error {
	return decode(b, func(r *pbReader, f int) {
		switch f {
		case 1:
			if r.varint() == 1 {
				ev.Type = "DELETE"
			}
		case 2:
			r.msg(&ev.Kv)
		default:
			r.skip()
		}
	})
}

// authResp is AuthenticateResponse: the token is field 2.
type authResp struct{ Token string }

func (m *authResp) unmarshalPB(b []byte) error {
	return decode(b, func(r *pbReader, f int) {
		if f == 2 {
			m.Token = r.str()
		} else {
			r.skip()
		}
	})
}

// discard is an answer this client does not read (LeaseRevokeResponse).
type discard struct{}

func (discard) unmarshalPB([]byte) error { return nil }

func (m *statusResp) unmarshalPB(b []byte) error {
	return decode(b, func(r *pbReader, f int) {
		switch f {
		case 2:
			m.Version = r.str()
		case 8:
			m.Errors = append(m.Errors, r.str())
		default:
			r.skip()
		}
	})
}

var alarmTypes = map[uint64]string{0: "NONE", 1: "NOSPACE", 2: "CORRUPT"}

func (m *alarmMember) unmarshalPB(b []byte) error {
	return decode(b, func(r *pbReader, f int) {
		switch f {
		case 1:
			m.MemberID = strconv.FormatUint(r.varint(), 10)
		case 2:
			v := r.varint()
			if m.Alarm = alarmTypes[v]; m.Alarm == "" {
				m.Alarm = strconv.FormatUint(v, 10)
			}
		default:
			r.skip()
		}
	})
}

func (m *alarmResp) unmarshalPB(b []byte) error {
	return decode(b, func(r *pbReader, f int) {
		if f == 2 {
			var a alarmMember
			r.msg(&a)
			m.Alarms = append(m.Alarms, a)
		} else {
			r.skip()
		}
	})
}

func (m *member) unmarshalPB(b []byte) error {
	return decode(b, func(r *pbReader, f int) {
		switch f {
		case 1:
			m.ID = strconv.FormatUint(r.varint(), 10)
		case 2:
			m.Name = r.str()
		case 5:
			m.IsLearner = r.bool()
		default:
			r.skip()
		}
	})
}

func (m *memberListResp) unmarshalPB(b []byte) error {
	return decode(b, func(r *pbReader, f int) {
		if f == 2 {
			var x member
			r.msg(&x)
			m.Members = append(m.Members, x)
		} else {
			r.skip()
		}
	})
}
