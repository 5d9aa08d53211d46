// The field list of RequestHeader (request_header_table.h) is the .proto's, and the codec handles
// every field on it: its bytes are protobuf's, through the fast path and through the fallback.
#include "rpc/core/request_header_table.h"

#include <google/protobuf/descriptor.h>
#include <gtest/gtest.h>

#include <set>
#include <string>

namespace rrpc::rpc {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

HeaderFieldType TypeOf(const FieldDescriptor& f) {
  switch (f.type()) {
    case FieldDescriptor::TYPE_INT32:
      return HeaderFieldType::kInt32;
    case FieldDescriptor::TYPE_UINT32:
      return HeaderFieldType::kUint32;
    case FieldDescriptor::TYPE_FIXED64:
      return HeaderFieldType::kFixed64;
    case FieldDescriptor::TYPE_MESSAGE:
      return HeaderFieldType::kMessage;
    default:
      ADD_FAILURE() << f.name() << ": a type the list cannot say";
      return HeaderFieldType::kMessage;
  }
}

HeaderFieldLabel LabelOf(const FieldDescriptor& f) {
  if (f.is_required()) return HeaderFieldLabel::kRequired;
  return f.is_repeated() ? HeaderFieldLabel::kRepeated : HeaderFieldLabel::kOptional;
}

TEST(RequestHeaderTableTest, ListsEveryFieldOfTheProtoWithItsNumberTypeAndLabel) {
  const Descriptor* d = RequestHeader::descriptor();
  std::set<int> listed;
  int previous = 0;
  for (const RequestHeaderField& row : kRequestHeaderFields) {
    SCOPED_TRACE(std::string(row.name));
    EXPECT_GT(row.number, previous) << "rows in field-number order";
    previous = row.number;
    EXPECT_TRUE(listed.insert(row.number).second);
    const FieldDescriptor* f = d->FindFieldByNumber(row.number);
    ASSERT_NE(nullptr, f) << "no field " << row.number << " in rpc_header.proto";
    EXPECT_EQ(row.name, f->name());
    EXPECT_EQ(row.type, TypeOf(*f));
    EXPECT_EQ(row.label, LabelOf(*f));
  }
  for (int i = 0; i < d->field_count(); i++) {
    EXPECT_EQ(1u, listed.count(d->field(i)->number()))
        << d->field(i)->name() << " is in rpc_header.proto but not in kRequestHeaderFields";
  }
}

// Sets `f` of `m` to a value that is not its default (every field of it, for a message).
void SetSample(Message* m, const FieldDescriptor* f) {
  const Reflection* r = m->GetReflection();
  switch (f->cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32:
      f->is_repeated() ? r->AddInt32(m, f, 300) : r->SetInt32(m, f, 300);
      break;
    case FieldDescriptor::CPPTYPE_UINT32:
      if (f->is_repeated()) {
        r->AddUInt32(m, f, 0);
        r->AddUInt32(m, f, 70000);
      } else {
        r->SetUInt32(m, f, 70000);
      }
      break;
    case FieldDescriptor::CPPTYPE_UINT64:
      r->SetUInt64(m, f, 0x0102030405060708ULL + static_cast<uint64_t>(f->number()));
      break;
    case FieldDescriptor::CPPTYPE_STRING:
      r->SetString(m, f, "sample-" + f->name());
      break;
    case FieldDescriptor::CPPTYPE_MESSAGE: {
      Message* sub = r->MutableMessage(m, f);
      for (int i = 0; i < sub->GetDescriptor()->field_count(); i++) {
        SetSample(sub, sub->GetDescriptor()->field(i));
      }
      break;
    }
    default:
      ADD_FAILURE() << f->name() << ": no sample for its type";
  }
}

std::string Encode(const RequestHeaderFields& h) {
  std::string out(EncodedSize(h), '\0');
  uint8_t* begin = reinterpret_cast<uint8_t*>(out.data());
  EXPECT_EQ(begin + out.size(), EncodeTo(h, begin));
  return out;
}

// Each field (with the rest of its group), alone beside the call id: decoded by the fast path or
// the fallback and encoded again, the bytes are protobuf's. A field the codec skips or misreads
// fails here.
TEST(RequestHeaderTableTest, EveryFieldRoundTripsThroughTheCodecAsProtobufWritesIt) {
  const Descriptor* d = RequestHeader::descriptor();
  for (const RequestHeaderField& row : kRequestHeaderFields) {
    SCOPED_TRACE(std::string(row.name));
    RequestHeader pb;
    pb.set_call_id(7);
    for (const RequestHeaderField& other : kRequestHeaderFields) {
      const bool same_group = row.group != HeaderFieldGroup::kNone && other.group == row.group;
      if (&other == &row || same_group) SetSample(&pb, d->FindFieldByNumber(other.number));
    }
    const std::string bytes = pb.SerializeAsString();
    RequestHeaderFields decoded;
    ASSERT_TRUE(DecodeHeader(Slice(bytes), &decoded));
    EXPECT_EQ(bytes, Encode(decoded));
    // The fallback: the same header with a field this version does not know.
    const std::string unknown_field("\xf8\x07\x01", 3);  // field 127, varint 1
    const uint64_t slow_before = HeadersDecodedByProtobuf();
    RequestHeaderFields decoded_slowly;
    ASSERT_TRUE(DecodeHeader(Slice(bytes + unknown_field), &decoded_slowly));
    EXPECT_EQ(slow_before + 1, HeadersDecodedByProtobuf());
    EXPECT_EQ(bytes, Encode(decoded_slowly));
    RequestHeaderFields from_proto;
    FieldsFromProto(pb, &from_proto);
    EXPECT_EQ(bytes, Encode(from_proto));
  }
}

}  // namespace
}  // namespace rrpc::rpc
